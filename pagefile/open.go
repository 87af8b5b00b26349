package pagefile

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// opener carries the state of one Open.
type opener struct {
	f          *File
	dir        string
	rep        *Report
	hdr        fileHeader
	noFreeList bool // Inspect: leave the free list empty, read no db.free, scan nothing
	// newer: pages of db.data written by a checkpoint after meta, found
	// while db.redo could not restore that checkpoint (findNewer), and
	// why it could not.
	newer         []newerPage
	newerWhy      string
	newerMetaLost bool // the other meta slot is not intact
}

// newerPage is a page of db.data a checkpoint newer than meta wrote.
type newerPage struct {
	id         PageID
	checkpoint uint64
}

func (o *opener) open() error {
	f, rep := o.f, o.rep
	start := time.Now()
	defer func() { rep.TotalDuration = time.Since(start) }()

	exists, err := vfs.Exists(f.fs, f.dataName)
	if err != nil {
		return fmt.Errorf("pagefile: stat %s: %w", f.dataName, err)
	}
	if !exists {
		if f.opts.ReadOnly {
			return fmt.Errorf("pagefile: open %s read-only: %w", f.dataName, os.ErrNotExist)
		}
		if err := o.create(); err != nil {
			return err
		}
		rep.Created = true
	}
	if f.opts.ReadOnly {
		// Before anything is read: a checkpoint that writes in place
		// while this handle reads changes the State (see File.Changed).
		// A State that cannot be read leaves the damage to the reads
		// below, and Changed false.
		var serr error
		f.roState, serr = ReadState(f.fs, o.dir)
		f.roStateOK = serr == nil
	}

	// Header and meta slots.
	flag := os.O_RDWR
	if f.opts.ReadOnly {
		flag = os.O_RDONLY
	}
	if f.data, err = f.fs.OpenFile(f.dataName, flag, 0o600); err != nil {
		return fmt.Errorf("pagefile: open %s: %w", f.dataName, err)
	}
	if f.dataSize, err = f.data.Size(); err != nil {
		return fmt.Errorf("pagefile: size of %s: %w", f.dataName, err)
	}
	hb := make([]byte, hdrSize)
	if err := readFull(f.data, hb, 0); err != nil {
		return fmt.Errorf("%w: %s@0: reading the header: %w", ErrCorrupt, f.dataName, err)
	}
	if o.hdr, err = decodeHeader(hb, f.dataName); err != nil {
		return err
	}
	f.pageSize, f.storeID = o.hdr.pageSize, o.hdr.storeID
	meta, slot, err := o.readMeta()
	if err != nil {
		return err
	}
	rep.MetaDuration = time.Since(start)

	// db.redo.
	t := time.Now()
	if meta, slot, err = o.redo(meta, slot); err != nil {
		return err
	}
	rep.MetaSlot, rep.MetaSeq, rep.MetaID = slot, meta.Seq, meta.ID
	rep.RedoDuration = time.Since(t)
	if !f.opts.ReadOnly && f.dataSize < int64(meta.PageCount)*int64(f.pageSize) {
		return fmt.Errorf("%w: %s: size %d < page count %d * page size %d", ErrCorrupt, f.dataName, f.dataSize, meta.PageCount, f.pageSize)
	}
	if !f.opts.ReadOnly {
		if err := o.rootNotNewer(meta); err != nil {
			return err
		}
	}
	f.mu.meta = meta
	f.mu.pageCount = PageID(meta.PageCount)
	f.mu.dirty = make(map[PageID]*dirtyPage)
	f.mu.unwritten = make(map[PageID]struct{})

	// The free list. Its files are replaced by renames at every
	// checkpoint, which writes the new one to db.free.tmp first: a
	// directory at any of these names would fail the first checkpoint,
	// and the handle with it, long after Open. At db.free.tmp anything but
	// a regular file is refused, a symbolic link not followed: a FIFO
	// fails the checkpoint as a directory does, and a link would have it
	// write outside the store's directory (writeFreeFile never follows
	// one; this says so at once).
	if !f.opts.ReadOnly && !rep.Created {
		for _, name := range []string{f.freeName, f.freeName + prevSuffix} {
			if _, isDir, err := f.fs.Stat(name); err == nil && isDir {
				return fmt.Errorf("%w: %s is a directory, not a free-list file: move it out of the store's directory (kdbtool repair --apply moves it aside)", ErrCorrupt, name)
			}
		}
		tmp := f.freeName + tmpSuffix
		if typ, err := vfs.LType(f.fs, tmp); err == nil && !typ.IsRegular() {
			return fmt.Errorf("%w: %s is %s, not a free-list file: move it out of the store's directory (kdbtool repair --apply moves it aside)", ErrCorrupt, tmp, vfs.FileKind(typ))
		}
	}
	t = time.Now()
	switch {
	case rep.Created:
		f.mu.free = newFreeList()
		rep.FreeListPath = FreeListCreated
	case o.noFreeList:
		f.mu.free = newFreeList()
		rep.FreeListPath = "not loaded"
	case f.opts.ForceScan:
		rep.Reason = "forced"
	default:
		f.mu.free, rep.FreeListFile, rep.Reason = o.loadFreeList(meta)
	}
	if f.mu.free == nil {
		rep.FreeListPath = FreeListScanned
		if f.mu.free, err = o.scan(meta); err != nil {
			return err
		}
	} else if rep.FreeListPath == "" {
		rep.FreeListPath = FreeListTrusted
		// Trusted, but proven page by page before use (proof.go).
		if f.mu.free.count() > 0 {
			f.mu.unproven = f.mu.free.clone()
		}
	}
	rep.FreeListDuration = time.Since(t)
	rep.FreePages = f.mu.free.count()
	if err := o.newerInUse(meta); err != nil {
		return err
	}

	// The read mapping.
	if f.mu.view, err = f.mapData(); err != nil {
		return err
	}
	if rep.FreeListPath == FreeListScanned {
		// The scan verified every page below the page count, but those it
		// found damaged: a read of one must still fail.
		damaged := make(map[PageID]bool, len(rep.Damaged))
		for _, d := range rep.Damaged {
			damaged[d.ID] = true
		}
		for id := FirstDataPage; id < f.mu.pageCount && int64(id+1)*int64(f.pageSize) <= f.mu.view.valid.Load(); id++ {
			if !damaged[id] {
				f.mu.view.setVerified(id)
			}
		}
	}
	return nil
}

// mapData maps db.data read-only, or returns a ReadAt view when the FS
// cannot map (vfs.ErrMmapUnsupported: MemFS). Any other mapping error is
// returned.
func (f *File) mapData() (*view, error) {
	if f.dataSize == 0 {
		return newView(nil, f.pageSize), nil
	}
	size := mapSize(f.dataSize)
	mm, err := f.data.Mmap(size)
	if errors.Is(err, vfs.ErrMmapUnsupported) {
		return newView(nil, f.pageSize), nil
	}
	if err != nil {
		return nil, fmt.Errorf("pagefile: mmap %s (%d bytes): %w", f.dataName, size, err)
	}
	v := newView(mm, f.pageSize)
	v.valid.Store(f.dataSize)
	return v, nil
}

// mapSize is how much address space to map for a file of size bytes: twice
// the file, at least 256 MiB, so that the file grows many times before it
// needs a new mapping. Address space beyond the file costs nothing until a
// page of it is read, and no page beyond the file is ever read.
func mapSize(size int64) int64 {
	m := max(2*size, 256<<20)
	if m != int64(int(m)) {
		return size
	}
	return m
}

// create writes a new empty store: db.data (header and meta slot 0 at
// checkpoint 0) and a matching db.free, each atomically. On return both are
// durable.
func (o *opener) create() error {
	f := o.f
	// Every directory created syncs its entry into its parent, and the
	// store's own entry is synced even when it existed (its creator may
	// have died before syncing it): db.data synced into a directory whose
	// entry is not durable is lost with it at a power loss.
	if err := vfs.MkdirAllDurable(f.fs, o.dir, 0o750); err != nil {
		return fmt.Errorf("pagefile: create %s: %w", o.dir, err)
	}
	if err := f.fs.SyncDir(filepath.Dir(filepath.Clean(o.dir))); err != nil {
		return fmt.Errorf("pagefile: create %s: %w", o.dir, err)
	}
	ps := f.opts.PageSize
	h := fileHeader{pageSize: ps, storeID: f.opts.StoreID}
	if h.storeID == ([16]byte{}) {
		_, _ = rand.Read(h.storeID[:])
	}
	meta := Meta{ID: newCheckpointID(0), PageSize: uint32(ps), PageCount: uint64(FirstDataPage)}
	buf := make([]byte, int(FirstDataPage)*ps)
	encodeHeader(buf, h)
	encodeMeta(buf[metaSlotPage*ps:(metaSlotPage+1)*ps], &meta, h.storeID)
	if err := vfs.WriteFileAtomic(f.fs, f.dataName, buf, 0o600); err != nil {
		return fmt.Errorf("pagefile: create %s: %w", f.dataName, err)
	}
	free := encodeFreeFile(h.storeID, meta.ID, meta.PageCount, newFreeList())
	if err := vfs.WriteFileAtomic(f.fs, f.freeName, free, 0o600); err != nil {
		return fmt.Errorf("pagefile: create %s: %w", f.freeName, err)
	}
	return nil
}

// readMeta reads both meta slots and returns the newest intact one.
func (o *opener) readMeta() (Meta, int, error) {
	f := o.f
	var best Meta
	bestSlot := -1
	var errs []error
	buf := make([]byte, f.pageSize)
	for s := 0; s < numMetaSlots; s++ {
		off := int64(metaSlotPage+s) * int64(f.pageSize)
		if err := readFull(f.data, buf, off); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s@%d: meta slot %d: %w", ErrCorrupt, f.dataName, off, s, err))
			continue
		}
		m, err := decodeMeta(buf, s, o.hdr, f.dataName, off)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if bestSlot < 0 || m.Seq > best.Seq {
			best, bestSlot = m, s
		}
	}
	if bestSlot < 0 {
		return Meta{}, 0, fmt.Errorf("no intact meta slot: %w", errors.Join(errs...))
	}
	return best, bestSlot, nil
}

// otherSlot returns the meta of the slot that is not slot, and its
// number: the zero Meta if it is not intact.
func (o *opener) otherSlot(slot int) (Meta, int) {
	f := o.f
	other := (slot + 1) % numMetaSlots
	buf := make([]byte, f.pageSize)
	off := int64(metaSlotPage+other) * int64(f.pageSize)
	if err := readFull(f.data, buf, off); err != nil {
		return Meta{}, other
	}
	m, err := decodeMeta(buf, other, o.hdr, f.dataName, off)
	if err != nil {
		return Meta{}, other
	}
	return m, other
}

// redo applies a complete db.redo at least as new as meta (overlays it when
// ReadOnly) and returns the resulting meta and slot.
func (o *opener) redo(meta Meta, slot int) (Meta, int, error) {
	f, rep := o.f, o.rep
	flag := os.O_RDWR | os.O_CREATE
	if f.opts.ReadOnly {
		flag = os.O_RDONLY
	}
	existed, err := vfs.Exists(f.fs, f.redoName)
	if err != nil {
		return meta, slot, fmt.Errorf("pagefile: stat %s: %w", f.redoName, err)
	}
	if !existed && f.opts.ReadOnly {
		return meta, slot, o.findNewer(nil, 0, meta, slot, "db.redo missing")
	}
	r, err := f.fs.OpenFile(f.redoName, flag, 0o600)
	if errors.Is(err, vfs.ErrNotRegular) {
		// A directory or a FIFO holds no redo batch, and a checkpoint
		// could not write one there.
		return meta, slot, fmt.Errorf("%w: %s is not a regular file (%w): move it out of the store's directory (kdbtool repair --apply moves it aside)", ErrCorrupt, f.redoName, err)
	}
	if err != nil {
		return meta, slot, fmt.Errorf("pagefile: open %s: %w", f.redoName, err)
	}
	if f.opts.ReadOnly {
		defer r.Close()
	} else {
		f.redo = r
		f.mu.redoDirSync = !existed
	}
	size, err := r.Size()
	if err != nil {
		return meta, slot, fmt.Errorf("pagefile: size of %s: %w", f.redoName, err)
	}
	if size == 0 {
		// A new store's (no checkpoint has written one), or one emptied
		// or removed by hand: nothing of db.data may then be newer than
		// meta.
		why := "db.redo empty"
		if !existed {
			why = "db.redo missing"
		}
		return meta, slot, o.findNewer(r, 0, meta, slot, why)
	}
	if redoAlreadyApplied(r, size, f.storeID, meta.ID) {
		rep.RedoIgnored = fmt.Sprintf("db.redo already applied (checkpoint %v)", meta.ID)
		return meta, slot, nil
	}
	// Streamed twice (checked, then applied) through small buffers: fresh
	// large buffers cost more in page faults than the second pass costs in
	// copies from the page cache.
	h, err := decodeRedo(r, size, f.redoName)
	if errors.Is(err, errRedoIncomplete) {
		if terr := o.findNewer(r, size, meta, slot, err.Error()); terr != nil {
			return meta, slot, terr
		}
		rep.RedoIgnored = err.Error()
		return meta, slot, nil
	}
	if err != nil {
		return meta, slot, err
	}
	switch {
	case h.storeID != f.storeID:
		rep.RedoIgnored = fmt.Sprintf("db.redo store ID %x != db.data %x", h.storeID, f.storeID)
	case h.pageSize != f.pageSize:
		rep.RedoIgnored = fmt.Sprintf("db.redo page size %d != db.data %d", h.pageSize, f.pageSize)
	case h.id.Seq < meta.Seq:
		rep.RedoIgnored = fmt.Sprintf("db.redo checkpoint %v older than meta %v", h.id, meta.ID)
	case h.id.Seq == meta.Seq && h.id != meta.ID:
		rep.RedoIgnored = fmt.Sprintf("db.redo checkpoint %v != meta %v", h.id, meta.ID)
	case h.id.Seq > meta.Seq+1:
		// A crash leaves db.redo at most one checkpoint ahead of the
		// newest meta, or two when that meta's slot is lost (the other
		// slot then holds the one before it). Further ahead, db.data is
		// older than the checkpoint db.redo follows (an earlier copy put
		// back): its pages would land on a file that lacks the
		// checkpoints in between, ruining a store whose journal may
		// still hold everything since db.data's own checkpoint.
		if other, _ := o.otherSlot(slot); other.PageSize != 0 || h.id.Seq > meta.Seq+2 { // PageSize 0: the slot unreadable
			rep.RedoIgnored = fmt.Sprintf("db.redo checkpoint %v is more than one checkpoint ahead of meta %v (other meta slot: checkpoint %d): db.data is older than the checkpoint db.redo follows", h.id, meta.ID, other.Seq)
		}
	}
	if rep.RedoIgnored != "" {
		f.opts.Logger.Warn("pagefile: db.redo ignored", "reason", rep.RedoIgnored)
		return meta, slot, o.findNewer(r, size, meta, slot, rep.RedoIgnored)
	}
	// db.redo holds the pages its checkpoint wrote, not the ones before:
	// db.data must hold the pages of the checkpoint it follows, as it did
	// when that checkpoint began (nothing shrinks db.data). Shorter, it was
	// cut, and the batch would write its pages into holes beside missing
	// ones: a store that opens and then fails its page checks. The size is
	// read again, after the meta: a read-only handle of a live store read
	// it before a checkpoint that grew the file and wrote that meta.
	//
	// The checkpoint db.redo follows is the newest intact meta older than
	// db.redo's: meta, or, when db.redo is meta's own checkpoint (a crash
	// that kept its meta write and lost the file's growth, both unsynced),
	// the other slot's, if intact.
	base, baseSlot, ok := meta, slot, h.id.Seq > meta.Seq
	if !ok {
		base, baseSlot = o.otherSlot(slot)
		ok = base.Seq > 0 && base.Seq < h.id.Seq
	}
	if ok {
		rep.RedoBasePageCount = base.PageCount
	}
	if need := int64(base.PageCount) * int64(f.pageSize); ok && f.dataSize < need && !f.opts.ReadOnly {
		size, err := f.data.Size()
		if err != nil {
			return meta, slot, fmt.Errorf("pagefile: size of %s: %w", f.dataName, err)
		}
		if size < need {
			return meta, slot, fmt.Errorf("%w: %s: size %d < page count %d * page size %d of checkpoint %v (meta slot %d), which db.redo (checkpoint %v) follows: the file was cut (a checkpoint never shrinks it), and db.redo holds only the pages its own checkpoint wrote",
				ErrCorrupt, f.dataName, size, base.PageCount, f.pageSize, base.ID, baseSlot, h.id)
		}
	}
	newMeta, err := o.applyRedo(r, &h)
	if err != nil {
		return meta, slot, err
	}
	rep.RedoApplied, rep.RedoPages = true, len(h.positions)
	return newMeta, int(newMeta.Seq % numMetaSlots), nil
}

// findNewer lists (o.newer) the pages of db.data written by a checkpoint
// newer than meta while db.redo, which would restore that checkpoint, is
// missing, empty or reads as incomplete (why). A checkpoint writes in place
// only once its db.redo is complete and synced, so a crash while writing
// db.redo leaves db.data untouched, and the batch is rightly ignored. But a
// complete db.redo damaged or removed afterwards (a flipped or cut byte)
// looks the same: if the store stopped during the in-place writes, db.data
// holds pages of both checkpoints (an outside tester's flipped magic after
// a crash mid-checkpoint opened as a mix of the two). The pages db.redo
// lists are checked when its header and position table read as a batch of
// this store; when they do not, every page of db.data is. Whether a page
// found matters (it was in use at meta's checkpoint) is known only once the
// free list is: newerInUse.
func (o *opener) findNewer(r io.ReaderAt, size int64, meta Meta, slot int, why string) error {
	f := o.f
	if o.noFreeList {
		return nil // Inspect: newerInUse could not tell which matter
	}
	if other, _ := o.otherSlot(slot); other.PageSize == 0 {
		// The newer checkpoint may have completed: its meta slot is the
		// one not intact.
		o.newerMetaLost = true
	}
	ps := int64(f.pageSize)
	pages := PageID(f.dataSize / ps)
	page := make([]byte, ps)
	o.newerWhy = why
	newer := func(id PageID, b []byte, off int64) error {
		h, err := decodePage(b, id, f.dataName, off)
		if err == nil && h.checkpoint > meta.Seq {
			o.newer = append(o.newer, newerPage{id, h.checkpoint})
		}
		return nil // a damaged page is left to its reads (or a scan)
	}
	check := func(id PageID) error {
		if id < FirstDataPage || id >= pages {
			return nil
		}
		off := int64(id) * ps
		if err := readFull(f.data, page, off); err != nil {
			return fmt.Errorf("pagefile: read %s@%d: %w", f.dataName, off, err)
		}
		return newer(id, page, off)
	}
	var hb [redoHeaderSize]byte
	if r != nil && size >= redoHeaderSize {
		if _, err := r.ReadAt(hb[:], 0); err != nil {
			return fmt.Errorf("pagefile: read %s@0: %w", f.redoName, err)
		}
	}
	count := binary.LittleEndian.Uint64(hb[redoCount:])
	var sid [16]byte
	copy(sid[:], hb[redoStoreID:])
	if binary.LittleEndian.Uint32(hb[redoMagicOff:]) == redoMagic && sid == f.storeID &&
		int64(binary.LittleEndian.Uint32(hb[redoPageSize:])) == ps && count <= uint64(size-redoHeaderSize)/8 {
		// The position table, streamed (it is as long as the file allows).
		buf := make([]byte, 8*min(count, 8<<10))
		for i := uint64(0); i < count; {
			n := min(count-i, uint64(len(buf)/8))
			off := int64(redoHeaderSize + 8*i)
			if _, err := r.ReadAt(buf[:8*n], off); err != nil {
				return fmt.Errorf("pagefile: read %s@%d: %w", f.redoName, off, err)
			}
			for j := range n {
				if err := check(PageID(binary.LittleEndian.Uint64(buf[8*j:]))); err != nil {
					return err
				}
			}
			i += n
		}
		return nil
	}
	// No table to go by: every page, read in chunks as the scan does.
	per := PageID(max(1, scanChunk/ps))
	chunk := make([]byte, int64(min(per, max(pages, 1)))*ps)
	for id := FirstDataPage; id < pages; id += per {
		k := min(per, pages-id)
		b := chunk[:int64(k)*ps]
		off := int64(id) * ps
		if err := readFull(f.data, b, off); err != nil {
			return fmt.Errorf("pagefile: read %s@%d: %w", f.dataName, off, err)
		}
		for j := PageID(0); j < k; j++ {
			if err := newer(id+j, b[int64(j)*ps:int64(j+1)*ps], off+int64(j)*ps); err != nil {
				return err
			}
		}
	}
	return nil
}

// newerInUse returns an error if a page findNewer found was in use at
// meta's checkpoint (below its page count and not on its free list, or, with
// a free list rebuilt by a scan, which read the newer pages, below its page
// count): opened at meta, the store would read a page of a later
// checkpoint. A page that was free at meta's checkpoint holds nothing meta
// refers to (the proof of the free list meets it before it is reused).
func (o *opener) newerInUse(meta Meta) error {
	f := o.f
	for _, p := range o.newer {
		if uint64(p.id) >= meta.PageCount || (o.rep.FreeListPath != FreeListScanned && f.mu.free.contains(p.id)) {
			continue
		}
		off := int64(p.id) * int64(f.pageSize)
		if f.opts.ReadOnly && (!f.roStateOK || f.Changed()) {
			// The writing process's checkpoint completed db.redo and
			// began writing in place since it was read: retry.
			return fmt.Errorf("%w: %s@%d: %v written by checkpoint %d, after this handle's %d", ErrStale, f.dataName, off, p.id, p.checkpoint, meta.Seq)
		}
		if o.newerMetaLost {
			return fmt.Errorf("%w: %s@%d: %v, in use at the meta's checkpoint %d, was written by checkpoint %d: the meta slot of that checkpoint is lost (damaged), and %s cannot restore it (%s): db.data holds a tree the meta does not describe (kdbtool repair says what can rebuild the store)", ErrCorrupt, f.dataName, off, p.id, meta.Seq, p.checkpoint, f.redoName, o.newerWhy)
		}
		return fmt.Errorf("%w: %s: %s, and %s@%d: %v, in use at the meta's checkpoint %d, was written by checkpoint %d: the store stopped while that checkpoint was being written in place, db.data holds part of it, and without an intact db.redo it cannot be finished (kdbtool repair says what can rebuild the store)", ErrCorrupt, f.redoName, o.newerWhy, f.dataName, off, p.id, meta.Seq, p.checkpoint)
	}
	return nil
}

// applyRedo checks every image of the batch and writes the ones that differ
// from db.data in place, then syncs db.data; when ReadOnly it keeps them in
// f.mu.overlay instead. It returns the batch's meta.
func (o *opener) applyRedo(r io.ReaderAt, h *redoHeader) (Meta, error) {
	f := o.f
	ps := f.pageSize
	var meta Meta
	img := make([]byte, ps)
	cur := make([]byte, ps)
	wrote := false
	for i, pos := range h.positions {
		roff := h.imageOffset(i)
		if err := readFull(r, img, roff); err != nil {
			return Meta{}, fmt.Errorf("pagefile: read %s@%d: %w", f.redoName, roff, err)
		}
		if pos < uint64(FirstDataPage) {
			m, err := decodeMeta(img, int(pos-metaSlotPage), o.hdr, f.redoName, roff)
			if err != nil {
				return Meta{}, err
			}
			if m.ID != h.id || m.PageCount != h.pageCount {
				return Meta{}, fmt.Errorf("%w: %s@%d: meta image %v, page count %d != batch %v, %d", ErrCorrupt, f.redoName, roff, m.ID, m.PageCount, h.id, h.pageCount)
			}
			meta = m
		} else if _, err := decodePage(img, PageID(pos), f.redoName, roff); err != nil {
			return Meta{}, err
		}
		doff := int64(pos) * int64(ps)
		if f.opts.ReadOnly {
			if pos >= uint64(FirstDataPage) {
				if f.mu.overlay == nil {
					f.mu.overlay = make(map[PageID][]byte)
				}
				f.mu.overlay[PageID(pos)] = bytes.Clone(img)
			}
			continue
		}
		if doff+int64(ps) <= f.dataSize {
			if err := readFull(f.data, cur, doff); err != nil {
				return Meta{}, fmt.Errorf("pagefile: read %s@%d: %w", f.dataName, doff, err)
			}
			if bytes.Equal(cur, img) {
				continue
			}
		}
		if _, err := f.data.WriteAt(img, doff); err != nil {
			return Meta{}, fmt.Errorf("pagefile: apply %s to %s@%d: %w", f.redoName, f.dataName, doff, err)
		}
		wrote = true
		f.dataSize = max(f.dataSize, doff+int64(ps))
	}
	switch {
	case f.opts.ReadOnly:
	case wrote:
		if err := f.data.Sync(); err != nil {
			return Meta{}, fmt.Errorf("pagefile: sync %s after applying %s: %w", f.dataName, f.redoName, err)
		}
		// As at the end of a checkpoint: mark the batch applied (no sync).
		var mark [4]byte
		binary.LittleEndian.PutUint32(mark[:], redoAppliedMagic)
		moff := redoSize(len(h.positions), h.pageSize) - redoTrailerSize + trailerApplied
		if _, err := f.redo.WriteAt(mark[:], moff); err != nil {
			return Meta{}, fmt.Errorf("pagefile: write %s@%d: %w", f.redoName, moff, err)
		}
	default:
		// Every image already matched db.data, but the matching bytes may
		// sit unsynced in the page cache (a process crash during the
		// in-place write). db.redo still holds them, so the sync can wait
		// until just before the next checkpoint overwrites db.redo.
		f.dataUnsynced = true
	}
	return meta, nil
}

// loadFreeList returns the free list of db.free, or else of db.free.prev,
// if one can be trusted for meta, and which file it came from; else nil and
// the reason db.free was not trusted.
func (o *opener) loadFreeList(meta Meta) (*freeList, string, string) {
	l, reason := o.loadFreeFile(o.f.freeName, meta)
	if l != nil {
		return l, freeFileName, ""
	}
	if pl, _ := o.loadFreeFile(o.f.freeName+prevSuffix, meta); pl != nil {
		return pl, freeFileName + prevSuffix, ""
	}
	return nil, "", reason
}

// freeFileLimit is the largest size of a trustworthy db.free for a store
// of pageCount pages: it holds at most one range per two pages.
func freeFileLimit(pageCount uint64) int64 {
	return int64(freeHeaderSize) + int64(freeRangeSize)*int64(pageCount/2+1)
}

// loadFreeFile reads a db.free file and returns the free list if it can be
// trusted for meta, else nil and the reason.
func (o *opener) loadFreeFile(name string, meta Meta) (*freeList, string) {
	f := o.f
	size, _, err := f.fs.Stat(name)
	if err != nil {
		if isNotExist(err) {
			return nil, "db.free missing"
		}
		return nil, fmt.Sprintf("db.free: %v", err)
	}
	if limit := freeFileLimit(meta.PageCount); size > limit {
		return nil, fmt.Sprintf("db.free size %d exceeds %d for page count %d", size, limit, meta.PageCount)
	}
	b, err := vfs.ReadFile(f.fs, name)
	if err != nil {
		return nil, fmt.Sprintf("db.free: %v", err)
	}
	ff, err := decodeFreeFile(b, name)
	switch {
	case err != nil:
		return nil, err.Error()
	case ff.storeID != f.storeID:
		return nil, fmt.Sprintf("db.free store ID %x != db.data %x", ff.storeID, f.storeID)
	case ff.id != meta.ID:
		return nil, fmt.Sprintf("db.free checkpoint %v != meta %v", ff.id, meta.ID)
	case ff.pageCount != meta.PageCount:
		return nil, fmt.Sprintf("db.free page count %d != meta %d", ff.pageCount, meta.PageCount)
	}
	return ff.toFreeList(), ""
}

// rootNotNewer returns ErrCorrupt if the index root page, which every
// checkpoint writes, was written by a checkpoint after meta's: that
// checkpoint's meta slot is lost (damaged, with no db.redo to restore it),
// and db.data holds a tree meta does not describe (its pages may lie past
// meta's page count, where this handle would allocate). The read-only
// path finds the same page and says the same (newerPageErr); a writable
// open went on, took the newer tree's pages for free ones and leaked
// them. A damaged root page is left to the index's open to report.
func (o *opener) rootNotNewer(meta Meta) error {
	f := o.f
	if meta.Root < FirstDataPage || uint64(meta.Root) >= meta.PageCount {
		return nil
	}
	ps := int64(f.pageSize)
	off := int64(meta.Root) * ps
	b := make([]byte, ps)
	if err := readFull(f.data, b, off); err != nil {
		return nil
	}
	h, err := decodePage(b, meta.Root, f.dataName, off)
	if err != nil || h.checkpoint <= meta.Seq {
		return nil
	}
	return fmt.Errorf("%w: %s@%d: the index root %v was written by checkpoint %d, after the meta's %d: the meta slot of that checkpoint is lost (damaged, and no db.redo restores it), and db.data holds a tree the meta does not describe (kdbtool repair says what can rebuild it)", ErrCorrupt, f.dataName, off, meta.Root, h.checkpoint, meta.Seq)
}
