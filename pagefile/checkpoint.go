package pagefile

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/kdb-project/kdb/internal/invariants"
	"github.com/kdb-project/kdb/internal/vfs"
)

// Checkpoint is a prepared checkpoint: a snapshot of the dirty pages, the
// free list and the page count, waiting for CommitCheckpoint.
type Checkpoint struct {
	gen       uint64
	entries   []batchEntry
	free      *freeList
	pageCount PageID
	update    MetaUpdate
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
		for id, d := range f.mu.dirty {
			invariants.Assertf((d.typ == PageFree) == f.mu.free.contains(id),
				"%v: dirty page of type %d, on the free list: %v", id, d.typ, f.mu.free.contains(id))
		}
	}
	u.App = bytes.Clone(u.App)
	cp := &Checkpoint{
		entries:   make([]batchEntry, 0, len(f.mu.dirty)),
		free:      f.mu.free.clone(),
		pageCount: f.mu.pageCount,
		update:    u,
	}
	for id, d := range f.mu.dirty {
		cp.entries = append(cp.entries, batchEntry{id, d})
	}
	f.mu.prepGen++
	cp.gen = f.mu.prepGen
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
	positions, images := f.encodeBatch(cp, &meta)
	newView, err := f.writeCheckpoint(cp, &meta, positions, images, redoDirSync)
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
	v := f.mu.view
	for _, e := range cp.entries {
		// INVARIANT: the page was written in place and synced; clear its
		// verified bit before a reader can reach it through the mapping.
		v.clearVerified(e.id)
		if f.mu.dirty[e.id] == e.d {
			delete(f.mu.dirty, e.id)
		}
	}
	f.mu.meta = meta
	f.mu.commitGen = cp.gen
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

// encodeBatch sorts the batch and encodes it: the meta slot image first,
// then the pages in ID order, one page image each.
func (f *File) encodeBatch(cp *Checkpoint, meta *Meta) ([]uint64, []byte) {
	slices.SortFunc(cp.entries, func(a, b batchEntry) int { return cmp.Compare(a.id, b.id) })
	ps := f.pageSize
	positions := make([]uint64, 0, len(cp.entries)+1)
	images := make([]byte, (len(cp.entries)+1)*ps)
	positions = append(positions, metaSlotPage+meta.Seq%numMetaSlots)
	encodeMeta(images[:ps], meta, f.storeID)
	for i, e := range cp.entries {
		positions = append(positions, uint64(e.id))
		encodePage(images[(i+1)*ps:(i+2)*ps], e.id, e.d.typ, e.d.payload, meta.Seq)
	}
	return positions, images
}

// writeCheckpoint does the I/O of a commit and returns the new mapping if
// db.data grew.
//
// The caller must hold f.commitMu.
func (f *File) writeCheckpoint(cp *Checkpoint, meta *Meta, positions []uint64, images []byte, redoDirSync bool) (*view, error) {
	ps := f.pageSize
	// 1. db.free, tagged with the new checkpoint ID.
	free := encodeFreeFile(f.storeID, meta.ID, meta.PageCount, cp.free)
	if err := f.writeFreeFile(free); err != nil {
		return nil, err
	}

	// 2. The batch into db.redo. db.redo must not be overwritten while
	// db.data may still depend on it.
	if f.dataUnsynced {
		if err := f.sync(f.data, f.dataName); err != nil {
			return nil, err
		}
		f.dataUnsynced = false
	}
	head := encodeRedoHead(f.storeID, meta.ID, ps, meta.PageCount, positions)
	sums := make([]byte, 8*len(positions))
	for i := range positions {
		putSum(sums[8*i:], images[i*ps:(i+1)*ps])
	}
	trailer := redoTrailer(head, sums)
	if _, err := f.redo.WriteAt(head, 0); err != nil {
		return nil, fmt.Errorf("pagefile: write %s: %w", f.redoName, err)
	}
	if _, err := f.redo.WriteAt(images, int64(len(head))); err != nil {
		return nil, fmt.Errorf("pagefile: write %s: %w", f.redoName, err)
	}
	toff := int64(len(head) + len(images))
	if _, err := f.redo.WriteAt(trailer, toff); err != nil {
		return nil, fmt.Errorf("pagefile: write %s: %w", f.redoName, err)
	}
	if err := f.redo.Truncate(toff + int64(len(trailer))); err != nil {
		return nil, fmt.Errorf("pagefile: truncate %s: %w", f.redoName, err)
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
	// IDs, the meta slot last; one sync.
	need := int64(meta.PageCount) * int64(ps)
	grew := false
	if need > f.dataSize {
		newSize := max(need, f.dataSize+f.opts.growStep(f.dataSize, ps))
		if err := f.data.Allocate(f.dataSize, newSize-f.dataSize); err != nil {
			return nil, fmt.Errorf("pagefile: grow %s to %d: %w", f.dataName, newSize, err)
		}
		f.dataSize, grew = newSize, true
	}
	for i := 1; i < len(positions); {
		j := i + 1
		for j < len(positions) && positions[j] == positions[j-1]+1 {
			j++
		}
		off := int64(positions[i]) * int64(ps)
		if _, err := f.data.WriteAt(images[i*ps:j*ps], off); err != nil {
			return nil, fmt.Errorf("pagefile: write %s@%d: %w", f.dataName, off, err)
		}
		i = j
	}
	moff := int64(positions[0]) * int64(ps)
	if _, err := f.data.WriteAt(images[:ps], moff); err != nil {
		return nil, fmt.Errorf("pagefile: write %s@%d: %w", f.dataName, moff, err)
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
func (f *File) writeFreeFile(data []byte) error {
	tmp := f.freeName + tmpSuffix
	file, err := f.fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("pagefile: create %s: %w", tmp, err)
	}
	if _, err := file.WriteAt(data, 0); err != nil {
		_ = file.Close()
		return fmt.Errorf("pagefile: write %s: %w", tmp, err)
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

// sync fsyncs file (unless UnsafeNoSync).
func (f *File) sync(file vfs.File, name string) error {
	if f.opts.UnsafeNoSync {
		return nil
	}
	if err := file.Sync(); err != nil {
		return fmt.Errorf("pagefile: sync %s: %w", name, err)
	}
	return nil
}
