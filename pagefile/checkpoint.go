package pagefile

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/kdb-project/kdb/internal/invariants"
	"github.com/kdb-project/kdb/vfs"
)

// Checkpoint is a prepared checkpoint: a snapshot of the dirty pages, the
// free list and the page count, waiting for CommitCheckpoint.
type Checkpoint struct {
	gen       uint64
	entries   []batchEntry
	free      *freeList
	pageCount PageID
	update    MetaUpdate
	// untrusted: the free list is being rebuilt (the loaded db.free lied,
	// proof.go), so the commit removes db.free instead of writing it; lies
	// is the count of lies at prepare, so that a lie found before the
	// commit has the same effect.
	untrusted bool
	lies      uint64
}

type batchEntry struct {
	id PageID
	d  *dirtyPage
}

// Pages returns the number of pages in the checkpoint's batch (written and
// freed pages; the meta slot not included).
func (cp *Checkpoint) Pages() int { return len(cp.entries) }

// PrepareCheckpoint snapshots what the next checkpoint writes: pointers to
// the dirty pages (O(dirty), no copy of page bytes), an O(1) copy-on-write
// clone of the free list, and the page count. It does no I/O. The caller
// must hold its write lock (no mutation may run concurrently). Every
// allocated page must have been written or freed.
func (f *File) PrepareCheckpoint(u MetaUpdate) (*Checkpoint, error) {
	if len(u.App) > MaxAppMeta {
		return nil, fmt.Errorf("pagefile: meta app bytes %d > %d", len(u.App), MaxAppMeta)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.writableLocked(); err != nil {
		return nil, err
	}
	if u.Root != 0 && (u.Root < FirstDataPage || u.Root >= f.mu.pageCount) {
		return nil, fmt.Errorf("%w: root %v outside [%d, %d)", ErrOutOfRange, u.Root, FirstDataPage, f.mu.pageCount)
	}
	if len(f.mu.unwritten) > 0 {
		var some PageID
		for id := range f.mu.unwritten {
			some = id
			break
		}
		return nil, fmt.Errorf("pagefile: checkpoint: %d allocated pages never written (e.g. %v)", len(f.mu.unwritten), some)
	}
	if invariants.Enabled {
		images := 0
		for id, d := range f.mu.dirty {
			invariants.Assertf((d.typ == PageFree) == f.mu.free.contains(id),
				"%v: dirty page of type %d, on the free list: %v", id, d.typ, f.mu.free.contains(id))
			if d.payload != nil {
				images++
			}
		}
		invariants.Assertf(images == f.mu.dirtyImages, "dirty images: counted %d, tracked %d", images, f.mu.dirtyImages)
	}
	u.App = bytes.Clone(u.App)
	cp := &Checkpoint{
		entries:   make([]batchEntry, 0, len(f.mu.dirty)),
		free:      f.mu.free.clone(),
		pageCount: f.mu.pageCount,
		update:    u,
		untrusted: f.mu.quarantine != nil,
		lies:      f.mu.proof.Lies,
	}
	f.mu.prepGen++
	cp.gen = f.mu.prepGen
	for id, d := range f.mu.dirty {
		d.pinGen = cp.gen
		cp.entries = append(cp.entries, batchEntry{id, d})
	}
	return cp, nil
}

// CommitCheckpoint writes a prepared checkpoint: db.free with a new unique
// checkpoint ID (atomically, synced), then the batch (the pages, the freed
// pages stamped PageFree and the new meta) to db.redo (synced), then in
// place into db.data (synced). Then it drops the committed dirty entries
// that were not dirtied again. It needs no caller lock: reads and mutations
// may run meanwhile. Commits run one at a time and in the order prepared.
//
// On return the checkpoint is durable (unless UnsafeNoSync). On error the
// handle is failed (Err); a reopen finds this checkpoint or the previous
// one, whole.
func (f *File) CommitCheckpoint(cp *Checkpoint) error {
	f.commitMu.Lock()
	defer f.commitMu.Unlock()
	f.mu.RLock()
	err := f.writableLocked()
	prev := f.mu.meta
	stale := cp.gen <= f.mu.commitGen
	redoDirSync := f.mu.redoDirSync
	if f.mu.proof.Lies != cp.lies {
		// The free list snapshot may hold a page that lied since.
		cp.untrusted = true
	}
	f.mu.RUnlock()
	if err != nil {
		return err
	}
	if stale {
		return fmt.Errorf("pagefile: commit of a checkpoint older than the last committed one")
	}
	meta := Meta{
		Seq:           prev.Seq + 1,
		ID:            newCheckpointID(prev.Seq + 1),
		PageSize:      uint32(f.pageSize),
		PageCount:     uint64(cp.pageCount),
		Root:          cp.update.Root,
		ReplaySegment: cp.update.ReplaySegment,
		ReplayOffset:  cp.update.ReplayOffset,
		App:           cp.update.App,
	}
	newView, err := f.writeCheckpoint(cp, &meta, redoDirSync)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		return f.failLocked(err)
	}
	f.mu.redoDirSync = false
	if newView != nil {
		f.mu.oldViews = append(f.mu.oldViews, f.mu.view)
		f.mu.view = newView
	}
	f.mu.meta = meta
	f.mu.commitGen = cp.gen
	v := f.mu.view
	for _, e := range cp.entries {
		// INVARIANT: the page was written in place and synced, and the
		// mapping now shows the bytes this commit encoded (or, if it was
		// dirtied again, reads go to the dirty cache until the next
		// commit): they need no checksum verification when read.
		v.setVerified(e.id)
		if f.mu.dirty[e.id] == e.d {
			f.dropDirtyLocked(e.id)
		}
	}
	// Images pinned by this checkpoint (or by older ones, which can no
	// longer commit) are released; a later prepared one keeps its own.
	kept := f.mu.pinned[:0]
	for _, d := range f.mu.pinned {
		if d.pinGen > cp.gen {
			kept = append(kept, d)
		}
	}
	clear(f.mu.pinned[len(kept):])
	f.mu.pinned = kept
	return nil
}

// Checkpoint is PrepareCheckpoint followed by CommitCheckpoint. On return
// the checkpoint is durable.
func (f *File) Checkpoint(u MetaUpdate) error {
	cp, err := f.PrepareCheckpoint(u)
	if err != nil {
		return err
	}
	return f.CommitCheckpoint(cp)
}

// batch is a sorted checkpoint batch whose page images are encoded on
// demand: image 0 is the meta slot, image i > 0 the page of entries[i-1].
// Encoding is deterministic, so the batch is encoded once for db.redo and
// once more for db.data, a chunk at a time, and never held whole in memory.
type batch struct {
	f         *File
	cp        *Checkpoint
	meta      *Meta
	positions []uint64 // page position of each image
	// pageSums holds each page image's own checksum once it has been
	// encoded, so that encoding it again skips the hashing.
	pageSums []uint64
	summed   []bool
}

// batchChunk is how many bytes of page images a checkpoint encodes and
// writes at once.
const batchChunk = 1 << 20

// newBatch sorts the checkpoint's pages and lists the images' positions.
func (f *File) newBatch(cp *Checkpoint, meta *Meta) *batch {
	slices.SortFunc(cp.entries, func(a, b batchEntry) int { return cmp.Compare(a.id, b.id) })
	positions := make([]uint64, 0, len(cp.entries)+1)
	positions = append(positions, metaSlotPage+meta.Seq%numMetaSlots)
	for _, e := range cp.entries {
		positions = append(positions, uint64(e.id))
	}
	return &batch{f: f, cp: cp, meta: meta, positions: positions,
		pageSums: make([]uint64, len(positions)), summed: make([]bool, len(positions))}
}

// encode writes image i into dst (one page).
func (b *batch) encode(dst []byte, i int) {
	if i == 0 {
		encodeMeta(dst, b.meta, b.f.storeID)
		return
	}
	e := b.cp.entries[i-1]
	if b.summed[i] {
		encodePageWithSum(dst, e.id, e.d.typ, e.d.payload, b.meta.Seq, b.pageSums[i])
		return
	}
	encodePage(dst, e.id, e.d.typ, e.d.payload, b.meta.Seq)
	b.pageSums[i], b.summed[i] = binary.LittleEndian.Uint64(dst[pgChecksum:]), true
}

// writeRuns encodes images [from, to) chunk by chunk into buf and passes
// each chunk of consecutive images to write with the index of its first
// image. With runs set, a chunk also ends where positions stop being
// consecutive, so that each chunk lands in one place of db.data.
func (b *batch) writeRuns(buf []byte, from, to int, runs bool, write func(first int, images []byte) error) error {
	ps := b.f.pageSize
	per := len(buf) / ps
	for i := from; i < to; {
		j := i + 1
		for j < to && j-i < per && (!runs || b.positions[j] == b.positions[j-1]+1) {
			j++
		}
		for k := i; k < j; k++ {
			b.encode(buf[(k-i)*ps:(k-i+1)*ps], k)
		}
		if err := write(i, buf[:(j-i)*ps]); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// writeCheckpoint does the I/O of a commit and returns the new mapping if
// db.data grew.
//
// The caller must hold f.commitMu.
func (f *File) writeCheckpoint(cp *Checkpoint, meta *Meta, redoDirSync bool) (*view, error) {
	ps := f.pageSize
	// 1. db.free, tagged with the new checkpoint ID; or, while the free
	// list is being rebuilt, no db.free at all: the next Open scans.
	if cp.untrusted {
		if err := f.removeFreeFiles(); err != nil {
			return nil, err
		}
	} else {
		free := encodeFreeFile(f.storeID, meta.ID, meta.PageCount, cp.free)
		if err := f.writeFreeFile(free); err != nil {
			return nil, err
		}
	}

	// 2. The batch into db.redo. db.redo must not be overwritten while
	// db.data may still depend on it.
	if f.dataUnsynced {
		if err := f.sync(f.data, f.dataName); err != nil {
			return nil, err
		}
		f.dataUnsynced = false
	}
	b := f.newBatch(cp, meta)
	positions := b.positions
	// At most batchChunk bytes, and no more than this checkpoint's images
	// need; kept for the next one.
	if n := min(max(ps, batchChunk/ps*ps), len(positions)*ps); len(f.ckBuf) < n {
		f.ckBuf = make([]byte, n)
	}
	buf := f.ckBuf
	head := encodeRedoHead(f.storeID, meta.ID, ps, meta.PageCount, positions)
	if _, err := f.redo.WriteAt(head, 0); err != nil {
		return nil, opErr("write", f.redoName, err)
	}
	sums := make([]byte, 8*len(positions))
	err := b.writeRuns(buf, 0, len(positions), false, func(first int, images []byte) error {
		for k := 0; k*ps < len(images); k++ {
			putSum(sums[8*(first+k):], images[k*ps:(k+1)*ps])
		}
		off := int64(len(head)) + int64(first)*int64(ps)
		if _, err := f.redo.WriteAt(images, off); err != nil {
			return fmt.Errorf("pagefile: write %s@%d: %w", f.redoName, off, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	trailer := redoTrailer(head, sums)
	toff := int64(len(head)) + int64(len(positions))*int64(ps)
	if _, err := f.redo.WriteAt(trailer, toff); err != nil {
		return nil, opErr("write", f.redoName, err)
	}
	if err := f.redo.Truncate(toff + int64(len(trailer))); err != nil {
		return nil, opErr("truncate", f.redoName, err)
	}
	if err := f.sync(f.redo, f.redoName); err != nil {
		return nil, err
	}
	if redoDirSync && !f.opts.UnsafeNoSync {
		if err := f.fs.SyncDir(filepath.Dir(f.redoName)); err != nil {
			return nil, fmt.Errorf("pagefile: sync dir of %s: %w", f.redoName, err)
		}
	}

	// 3. In place into db.data: grow, the pages in runs of consecutive
	// IDs, a sync, then the meta slot and a sync. Synced together, a power
	// loss could keep the meta and drop pages before it, a state only
	// db.redo repairs: one damaged or removed after such a crash (a second
	// fault) left Open nothing to tell it by, and the store opened at the
	// new meta over older pages. With the pages durable first, a meta of
	// this checkpoint on disk means its pages are, and pages without it are
	// newer than the meta Open finds (findNewer).
	need := int64(meta.PageCount) * int64(ps)
	grew := false
	if need > f.dataSize {
		newSize := max(need, f.dataSize+f.opts.growStep(f.dataSize, ps))
		if err := f.data.Allocate(f.dataSize, newSize-f.dataSize); err != nil {
			return nil, fmt.Errorf("pagefile: grow %s to %d: %w", f.dataName, newSize, err)
		}
		f.dataSize, grew = newSize, true
	}
	writeData := func(first int, images []byte) error {
		off := int64(positions[first]) * int64(ps)
		if _, err := f.data.WriteAt(images, off); err != nil {
			return fmt.Errorf("pagefile: write %s@%d: %w", f.dataName, off, err)
		}
		return nil
	}
	if err := b.writeRuns(buf, 1, len(positions), true, writeData); err != nil {
		return nil, err
	}
	if len(positions) > 1 {
		if err := f.sync(f.data, f.dataName); err != nil {
			return nil, err
		}
	}
	if err := b.writeRuns(buf, 0, 1, true, writeData); err != nil {
		return nil, err
	}
	if err := f.sync(f.data, f.dataName); err != nil {
		return nil, err
	}
	// 4. Mark db.redo applied, without a sync: the mark is written only
	// after db.data's sync returned, so if it survives a crash, db.data
	// holds the batch; if it is lost, Open re-applies the batch.
	if !f.opts.UnsafeNoSync {
		var mark [4]byte
		binary.LittleEndian.PutUint32(mark[:], redoAppliedMagic)
		moff := toff + trailerApplied
		if _, err := f.redo.WriteAt(mark[:], moff); err != nil {
			return nil, fmt.Errorf("pagefile: write %s@%d: %w", f.redoName, moff, err)
		}
	}
	if grew {
		f.mu.RLock()
		cur := f.mu.view
		f.mu.RUnlock()
		if cur.mm != nil && f.dataSize <= int64(len(cur.mm)) {
			// INVARIANT: the file holds these bytes now (Allocate
			// returned): the mapping may serve them.
			cur.valid.Store(f.dataSize)
			return nil, nil
		}
		// The checkpoint is durable; a mapping failure still fails the
		// handle, since reads of the new pages would have nowhere to go.
		return f.mapData()
	}
	return nil, nil
}

// writeFreeFile installs a new db.free and keeps the one it replaces as
// db.free.prev: written to db.free.tmp and synced, db.free renamed to
// db.free.prev, db.free.tmp renamed to db.free, the directory synced. Until
// this checkpoint's meta is durable, the meta still names the previous
// checkpoint, whose free list is then in db.free (crash before the renames
// are durable) or db.free.prev (after): either way Open can trust one.
// On return both names are durable.
//
// db.free.tmp is opened with O_NOFOLLOW: a symbolic link there (Open
// refuses one; this is for one planted later) fails the checkpoint and is
// never written through, which could write outside the store's directory.
func (f *File) writeFreeFile(data []byte) error {
	tmp := f.freeName + tmpSuffix
	file, err := f.fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return opErr("create", tmp, err)
	}
	if _, err := file.WriteAt(data, 0); err != nil {
		_ = file.Close()
		return opErr("write", tmp, err)
	}
	if err := f.sync(file, tmp); err != nil {
		_ = file.Close()
		return err
	}
	if err := file.Close(); err != nil {
		return fmt.Errorf("pagefile: close %s: %w", tmp, err)
	}
	if err := f.fs.Rename(f.freeName, f.freeName+prevSuffix); err != nil && !isNotExist(err) {
		return fmt.Errorf("pagefile: rename %s: %w", f.freeName, err)
	}
	if err := f.fs.Rename(tmp, f.freeName); err != nil {
		return fmt.Errorf("pagefile: rename %s: %w", tmp, err)
	}
	if f.opts.UnsafeNoSync {
		return nil
	}
	if err := f.fs.SyncDir(filepath.Dir(f.freeName)); err != nil {
		return fmt.Errorf("pagefile: sync dir of %s: %w", f.freeName, err)
	}
	return nil
}

// removeFreeFiles removes db.free and db.free.prev and syncs the directory,
// so that no Open trusts a free list until a checkpoint writes a new one:
// the checkpoint that removes them has a free list that is being rebuilt
// (proof.go). A crash before the removal is durable leaves the meta and
// db.free of an earlier checkpoint, which Open trusts and proves again.
func (f *File) removeFreeFiles() error {
	for _, name := range []string{f.freeName, f.freeName + prevSuffix} {
		if err := f.fs.Remove(name); err != nil && !isNotExist(err) {
			return fmt.Errorf("pagefile: remove %s: %w", name, err)
		}
	}
	if f.opts.UnsafeNoSync {
		return nil
	}
	if err := f.fs.SyncDir(filepath.Dir(f.freeName)); err != nil {
		return fmt.Errorf("pagefile: sync dir of %s: %w", f.freeName, err)
	}
	return nil
}

// sync fsyncs file (unless UnsafeNoSync).
func (f *File) sync(file vfs.File, name string) error {
	if f.opts.UnsafeNoSync {
		return nil
	}
	if err := file.Sync(); err != nil {
		return opErr("sync", name, err)
	}
	return nil
}
