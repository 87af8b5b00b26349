package journal

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/kdb-project/kdb/internal/invariants"
	"github.com/kdb-project/kdb/vfs"
)

// run is the syncer goroutine: under SyncInterval it makes each batch
// durable within SyncInterval of its write; it exits at Close. It sleeps
// until a batch is written (writeBatch signals unsynced), waits
// SyncInterval and syncs everything written by then: an idle journal
// costs nothing, whatever the interval (a free-running ticker of 1 ns kept
// a core busy). A batch written after the syncer took the signal signals
// again, so the next round covers it.
func (j *Journal) run() {
	defer close(j.done)
	if j.opts.Sync != SyncInterval {
		<-j.wake
		return
	}
	t := time.NewTimer(j.opts.SyncInterval)
	t.Stop()
	for {
		select {
		case <-j.wake:
			return
		case <-j.unsynced:
		}
		t.Reset(j.opts.SyncInterval)
		select {
		case <-j.wake:
			t.Stop()
			return
		case <-t.C:
		}
		if j.Err() == nil {
			// A failure fails the journal (and is logged by fail):
			// there is no caller to return it to.
			_ = j.Sync()
		}
	}
}

// writeBatch encodes recs (size bytes of frames) as one batch and writes
// it, rotating first if it does not fit in the active segment. Does not
// sync (a rotation syncs the old segment). Under SyncInterval and
// UnsafeSyncNever it publishes the batch.
//
// The caller must hold j.wmu.
func (j *Journal) writeBatch(recs []Record, size int64) ([]Location, Location, error) {
	w := &j.w
	if w.seg.sealed || w.off+size+frameSize(0) > j.opts.SegmentSize {
		if err := j.rotate(); err != nil {
			return nil, Location{}, err
		}
	}
	// INVARIANT: frames start 8-aligned, synced never passes what was
	// written, and the batch leaves room for the seal.
	invariants.Assertf(w.off%recAlign == 0 && w.synced <= w.off && w.off+size+frameSize(0) <= j.opts.SegmentSize,
		"journal: writer state off=%d synced=%d size=%d", w.off, w.synced, size)
	start := w.off
	locs := make([]Location, len(recs))
	w.buf = w.buf[:0]
	for i, rec := range recs {
		var flags uint8
		if i == 0 {
			flags |= flagBatchBegin
		}
		if i == len(recs)-1 {
			flags |= flagBatchEnd
		}
		locs[i] = Location{w.seg.id, w.off}
		w.buf, w.prev = appendFrame(w.buf, w.seg.seed, w.off, w.prev, uint32(w.synced), rec.Type, flags, rec.Payload)
		w.off += frameSize(len(rec.Payload))
	}
	if err := j.writeBuf(start); err != nil {
		return nil, Location{}, err
	}
	w.sinceMark = true
	j.mu.Lock()
	w.seg.written = w.off
	j.mu.stats.Commits++
	j.mu.stats.Records += int64(len(recs))
	j.mu.stats.Batches++
	if j.opts.Sync != SyncAlways {
		j.publishLocked()
	}
	j.mu.Unlock()
	if j.opts.Sync == SyncInterval {
		select {
		case j.unsynced <- struct{}{}:
		default: // signalled already: the syncer's next round covers it
		}
	}
	return locs, Location{w.seg.id, w.off}, nil
}

// SyncTo makes every record before end durable, and under SyncAlways
// visible to readers. If they are not yet, it fdatasyncs the active
// segment, covering everything written before the fdatasync began (so the
// batches of concurrent writers share it); Writes proceed meanwhile.
// Concurrent SyncTo calls are serialised: one waits for at most the
// fdatasync under way and its own. On return the records before end are
// durable. A failure fails the journal.
func (j *Journal) SyncTo(end Location) error {
	if j.opts.ReadOnly {
		return ErrReadOnly
	}
	j.smu.Lock()
	defer j.smu.Unlock()
	j.wmu.Lock()
	w := &j.w
	if end.Segment < w.seg.id || end.Segment == w.seg.id && end.Offset <= w.synced {
		// INVARIANT: a segment before the active one was sealed and synced
		// before the active one was created.
		j.wmu.Unlock()
		return nil
	}
	if err := j.writable(false); err != nil {
		j.wmu.Unlock()
		return err
	}
	seg, target, last := w.seg, w.off, w.prevOff
	j.wmu.Unlock()

	j.fsyncMu.Lock()
	if err := j.Err(); err != nil {
		// A rotation's fdatasync failed meanwhile: this one would prove
		// nothing about the pages that failure dropped.
		j.fsyncMu.Unlock()
		return err
	}
	seg.rw.RLock()
	var err error
	if seg.f != nil { // else removed: it was sealed and synced
		err = seg.f.Sync()
	}
	seg.rw.RUnlock()
	j.mu.Lock()
	j.mu.stats.Fsyncs++
	j.mu.Unlock()
	if err != nil {
		err = j.fail(fmt.Errorf("journal: sync %s: %w", seg.id, err))
		j.fsyncMu.Unlock()
		return err
	}
	j.fsyncMu.Unlock()
	j.wmu.Lock()
	defer j.wmu.Unlock()
	if w.seg == seg && w.synced < target {
		w.synced = target
	}
	j.mu.Lock()
	j.publishToLocked(seg, target, last)
	j.mu.Unlock()
	return nil
}

// Durable reports whether every record before end is durable (a SyncTo(end)
// would return at once).
func (j *Journal) Durable(end Location) bool {
	j.wmu.Lock()
	defer j.wmu.Unlock()
	return end.Segment < j.w.seg.id || end.Segment == j.w.seg.id && end.Offset <= j.w.synced
}

// publishLocked makes everything written to the active segment visible to
// readers and to Tail.
//
// The caller must hold j.wmu and j.mu.
func (j *Journal) publishLocked() {
	j.publishToLocked(j.w.seg, j.w.off, j.w.prevOff)
}

// publishToLocked makes the frames of segment s before end (the last of
// them at last) visible to readers, and to Tail if s is the active
// segment. It never moves the published end back.
//
// The caller must hold j.mu.
func (j *Journal) publishToLocked(s *segment, end, last int64) {
	if end > s.end {
		s.last = last
		s.end = end
	}
	if s.size < s.end {
		s.size = s.end
	}
	if n := len(j.mu.segs); n > 0 && j.mu.segs[n-1] == s {
		j.mu.tail = Location{s.id, s.end}
	}
}

// allocStep is the step in which a segment's file is preallocated: a
// segment grows by a step of written zeros (zeroFill) ahead of its
// records, up to SegmentSize, so that fdatasync rarely has a size change
// or block allocation to record, and what Open must read past the last
// record after a crash stays under a step (FORMAT.md §4.1).
const allocStep = 1 << 20

// zeroBlock is what zeroFill writes from; never written to.
var zeroBlock [64 << 10]byte

// zeroFill writes zeros over [off, to) of f. Does not sync.
//
// The journal preallocates by writing zeros rather than by fallocate:
// fallocate leaves "unwritten" extents, which the file system converts as
// records land in them, so every fdatasync of a record there also commits
// file-system metadata (ext4: a journal transaction). Blocks written once
// (the zeros reach the disk with the next fdatasync, one extra MiB per MiB
// of records) are overwritten in place. The bytes are the same either way:
// zeros after the last record.
func zeroFill(f vfs.File, off, to int64) error {
	zeros := zeroBlock[:]
	for off < to {
		n := min(int64(len(zeros)), to-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// allocFor returns the size a segment's file is preallocated to when its
// records end at end.
func (j *Journal) allocFor(end int64) int64 {
	return min((end+allocStep-1)/allocStep*allocStep, j.opts.SegmentSize)
}

// writeBuf writes the pending frames of w.buf, which start at segment offset
// start, growing the file first if they pass its preallocated size. Does
// not sync. A failure fails the journal.
func (j *Journal) writeBuf(start int64) error {
	w := &j.w
	if len(w.buf) == 0 {
		return nil
	}
	if end := start + int64(len(w.buf)); end > w.alloc {
		to := j.allocFor(end)
		if err := zeroFill(w.seg.f, w.alloc, to); err != nil {
			return j.fail(fmt.Errorf("journal: preallocate %s: %w", w.seg.id, err))
		}
		w.alloc = to
		j.mu.Lock()
		w.seg.size = max(w.seg.size, to)
		j.mu.Unlock()
	}
	// Remember where the last frame starts, for SegmentInfo.Last.
	w.prevOff = lastFrameOffset(w.buf, start)
	_, err := w.seg.f.WriteAt(w.buf, start)
	j.mu.Lock()
	j.mu.stats.Writes++
	if err == nil {
		j.mu.stats.Bytes += int64(len(w.buf))
	}
	j.mu.Unlock()
	if ws, ok := w.seg.f.(vfs.WritebackStarter); ok && err == nil && j.opts.Sync == SyncAlways {
		// The device writes the records while the caller works before
		// its SyncTo (the database applies the group): the fdatasync
		// then waits for less. Only where an fdatasync follows each
		// write: under the other policies the page cache may gather
		// writes first. A hint only: an error here (an unsupported file
		// system; an I/O error, which the fdatasync reports anyway)
		// changes nothing.
		_ = ws.StartWriteback(start, int64(len(w.buf)))
	}
	w.buf = w.buf[:0]
	if err != nil {
		return j.fail(fmt.Errorf("journal: write %s: %w", Location{w.seg.id, start}, err))
	}
	return nil
}

// lastFrameOffset returns the segment offset of the last frame in buf,
// whose first frame lies at start.
func lastFrameOffset(buf []byte, start int64) int64 {
	off, last := int64(0), int64(0)
	for off < int64(len(buf)) {
		last = off
		off += frameSize(int(binary.LittleEndian.Uint32(buf[off+recOffLength:])))
	}
	return start + last
}

// syncActive fdatasyncs the active segment. A failure fails the journal.
func (j *Journal) syncActive() error {
	w := &j.w
	j.fsyncMu.Lock()
	defer j.fsyncMu.Unlock()
	if err := j.Err(); err != nil {
		// A SyncTo's fdatasync failed meanwhile (its Write passed the
		// check before): see the invariants on fsyncMu.
		return err
	}
	err := w.seg.f.Sync()
	j.mu.Lock()
	j.mu.stats.Fsyncs++
	j.mu.Unlock()
	if err != nil {
		return j.fail(fmt.Errorf("journal: sync %s: %w", w.seg.id, err))
	}
	w.synced = w.off
	return nil
}

// rotate seals the active segment (seal record, fdatasync) and creates the
// next one. On return the old segment and the new segment's header and
// directory entry are durable.
func (j *Journal) rotate() error {
	w := &j.w
	if !w.seg.sealed {
		start := w.off
		w.buf, w.prev = appendFrame(w.buf[:0], w.seg.seed, w.off, w.prev, uint32(w.synced), typeSeal, flagBatchBegin|flagBatchEnd, nil)
		w.off += frameSize(0)
		if err := j.writeBuf(start); err != nil {
			return err
		}
		if err := j.syncActive(); err != nil {
			return err
		}
		j.mu.Lock()
		j.publishLocked()
		w.seg.sealed = true
		j.mu.Unlock()
	}
	seg, err := j.createSegment(w.seg.id + 1)
	if err != nil {
		return err
	}
	j.mu.Lock()
	j.mu.segs = append(j.mu.segs, seg)
	j.mu.tail = Location{seg.id, seg.end}
	j.mu.Unlock()
	old := w.seg
	w.seg, w.off, w.synced, w.prev, w.sinceMark, w.alloc = seg, segHeaderSize, segHeaderSize, seg.seed, false, seg.size
	// Sealed and synced above (or before this process): only reads use it
	// from now on, and the cache may close it.
	j.fds.add(old)
	return nil
}

// createSegment creates db-<id>.log atomically: it writes db-<id>.log.tmp
// (preallocated, header written, synced), renames it to its name and syncs
// the directory, so the name never refers to a segment without a valid
// header (vfs.WriteFileAtomic's steps, by hand: it cannot preallocate). It
// refuses to replace an existing segment. On return the segment is durable.
// A failure fails the journal.
func (j *Journal) createSegment(id SegmentID) (*segment, error) {
	fsys := j.opts.FS
	name := j.path(id)
	tmp := name + tmpSuffix
	failed := func(what string, err error) (*segment, error) {
		return nil, j.fail(fmt.Errorf("journal: create %s: %s: %w", id, what, err))
	}
	var sb [8]byte
	if _, err := rand.Read(sb[:]); err != nil {
		return failed("seed", err)
	}
	seed := binary.LittleEndian.Uint64(sb[:])
	hdr := encodeSegHeader(segHeader{id: id, seed: seed, created: time.Now().UnixNano(), store: j.opts.StoreID})
	if _, _, err := fsys.Stat(name); err == nil {
		return failed("exists", fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return failed("stat", err)
	}
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return failed("open", err)
	}
	size := j.allocFor(segHeaderSize)
	seg := &segment{id: id, seed: seed, name: name, f: f, fds: j.fds, size: size, end: segHeaderSize, last: -1}
	steps := []struct {
		what string
		do   func() error
	}{
		{"allocate", func() error { return zeroFill(f, 0, size) }},
		{"write header", func() error { _, err := f.WriteAt(hdr, 0); return err }},
		{"sync", f.Sync},
		{"rename", func() error { return fsys.Rename(tmp, name) }},
		{"sync dir", func() error { return fsys.SyncDir(j.dir) }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			_ = f.Close()
			return failed(st.what, err)
		}
	}
	j.mu.Lock()
	j.mu.stats.Writes++
	j.mu.stats.Bytes += segHeaderSize
	j.mu.stats.Fsyncs++
	j.mu.stats.DirSyncs++
	j.mu.stats.Rotations++
	j.mu.Unlock()
	return seg, nil
}

// finish runs at Close, under smu and wmu: if anything was appended
// since the last close mark, it syncs, then writes a close mark whose synced
// field covers every earlier byte, and syncs again.
func (j *Journal) finish() {
	w := &j.w
	if j.Err() != nil || !w.sinceMark || w.seg.sealed {
		return
	}
	if w.off+frameSize(0)*2 > j.opts.SegmentSize {
		// No room for a mark (the seal needs its own); the next writer
		// rotates. Just make what is written durable.
		if w.synced < w.off {
			_ = j.syncActive()
		}
		return
	}
	if w.synced < w.off {
		if err := j.syncActive(); err != nil {
			return
		}
	}
	start := w.off
	w.buf, w.prev = appendFrame(w.buf[:0], w.seg.seed, w.off, w.prev, uint32(w.synced), typeCloseMark, flagBatchBegin|flagBatchEnd, nil)
	w.off += frameSize(0)
	if err := j.writeBuf(start); err != nil {
		return
	}
	if err := j.syncActive(); err != nil {
		return
	}
	w.sinceMark = false
	j.mu.Lock()
	j.publishLocked()
	j.mu.Unlock()
}

// Mark writes a mark, a batch of one internal record (the close mark,
// FORMAT.md §4.4), after every record written so far, makes it durable and
// returns its location. That location is a replay position past
// everything before it, damage included: a caller that skipped damaged
// records (SkipDamaged) and applied the rest records it as its replay
// position at its next checkpoint, so that later Opens, which verify from
// the replay position on, no longer meet the damage. Before the mark, the
// segment is synced, so the mark's synced field covers every earlier byte
// (as Close's does).
func (j *Journal) Mark() (Location, error) {
	if j.opts.ReadOnly {
		return Location{}, ErrReadOnly
	}
	if err := j.Sync(); err != nil {
		return Location{}, err
	}
	j.wmu.Lock()
	if err := j.writable(false); err != nil {
		j.wmu.Unlock()
		return Location{}, err
	}
	locs, end, err := j.writeBatch([]Record{{Type: typeCloseMark}}, frameSize(0))
	j.wmu.Unlock()
	if err != nil {
		return Location{}, err
	}
	if err := j.SyncTo(end); err != nil {
		return Location{}, err
	}
	return locs[0], nil
}
