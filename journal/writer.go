package journal

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"time"

	"github.com/kdb-project/kdb/internal/invariants"
)

// run is the committer goroutine: it gathers every queued request into one
// round (one write, one fdatasync) until Close.
func (j *Journal) run() {
	defer close(j.done)
	var tick <-chan time.Time
	if j.opts.Sync == SyncInterval {
		t := time.NewTicker(j.opts.SyncInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-j.wake:
		case <-tick:
			if j.w.synced < j.w.off && j.Err() == nil {
				// A failure fails the journal (and is logged by fail):
				// there is no caller to return it to.
				_ = j.syncActive()
			}
			continue
		}
		j.mu.Lock()
		reqs := j.mu.queue
		j.mu.queue = nil
		closing := j.mu.closing
		j.mu.Unlock()
		if len(reqs) > 0 {
			j.commit(reqs)
		}
		if n := len(reqs); n > 1 && !closing {
			// The appenders just answered usually append again at once.
			// Give them a moment to queue, so that the next round carries
			// them with those already waiting, instead of the writers
			// settling into two cohorts that alternate rounds.
			target := n + j.queued()
			for i := 0; i < 8 && j.queued() < target; i++ {
				runtime.Gosched()
			}
		}
		if closing {
			j.finish()
			return
		}
	}
}

// queued returns the number of requests waiting for the committer.
func (j *Journal) queued() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.mu.queue)
}

// commit writes the batches of reqs in order, rotating segments as needed,
// syncs per the policy, publishes the new tail and answers every request.
// On return the acknowledged batches are durable under SyncAlways.
func (j *Journal) commit(reqs []*request) {
	err := j.Err()
	var records, batches int64
	needSync := j.opts.Sync == SyncAlways
	if err == nil {
		w := &j.w
		w.buf = w.buf[:0]
		start := w.off
		for _, r := range reqs {
			if r.sync {
				needSync = true
				continue
			}
			var size int64
			for _, rec := range r.recs {
				size += frameSize(len(rec.Payload))
			}
			if w.seg.sealed || w.off+size+frameSize(0) > j.opts.SegmentSize {
				if err = j.writeBuf(start); err != nil {
					break
				}
				if err = j.rotate(); err != nil {
					break
				}
				start = w.off
			}
			// INVARIANT: frames start 8-aligned, synced never passes what
			// was written, and the batch leaves room for the seal.
			invariants.Assertf(w.off%recAlign == 0 && w.synced <= w.off && w.off+size+frameSize(0) <= j.opts.SegmentSize,
				"journal: writer state off=%d synced=%d size=%d", w.off, w.synced, size)
			r.locs = make([]Location, len(r.recs))
			for i, rec := range r.recs {
				var flags uint8
				if i == 0 {
					flags |= flagBatchBegin
				}
				if i == len(r.recs)-1 {
					flags |= flagBatchEnd
				}
				r.locs[i] = Location{w.seg.id, w.off}
				w.buf, w.prev = appendFrame(w.buf, w.seg.seed, w.off, w.prev, uint32(w.synced), rec.Type, flags, rec.Payload)
				w.off += frameSize(len(rec.Payload))
			}
			records += int64(len(r.recs))
			batches++
			w.sinceMark = true
		}
		if err == nil {
			err = j.writeBuf(start)
		}
		if err == nil && needSync && w.synced < w.off {
			err = j.syncActive()
		}
	}
	j.mu.Lock()
	j.mu.stats.Commits++
	if err == nil {
		j.publishLocked()
		j.mu.stats.Records += records
		j.mu.stats.Batches += batches
	}
	j.mu.Unlock()
	for _, r := range reqs {
		if err != nil {
			r.locs, r.err = nil, err
		}
		close(r.done)
	}
}

// publishLocked makes everything written to the active segment visible to
// readers and to Tail.
//
// The caller must hold j.mu.
func (j *Journal) publishLocked() {
	s := j.w.seg
	if j.w.off > s.end {
		s.last = j.w.prevOff
		s.end = j.w.off
	}
	if s.size < s.end {
		s.size = s.end
	}
	j.mu.tail = Location{s.id, s.end}
}

// allocStep is the step in which a segment's file is preallocated: a
// segment grows by fallocate a step ahead of its records, up to
// SegmentSize, so that fdatasync rarely has a size change to record, and
// what Open must read past the last record after a crash stays under a
// step (FORMAT.md §J.1).
const allocStep = 1 << 20

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
		if err := w.seg.f.Allocate(w.alloc, to-w.alloc); err != nil {
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
	w.seg, w.off, w.synced, w.prev, w.sinceMark, w.alloc = seg, segHeaderSize, segHeaderSize, seg.seed, false, seg.size
	return nil
}

// createSegment creates db-<id>.log atomically: it writes db-<id>.log.tmp
// (preallocated, header written, synced), renames it to its name and syncs
// the directory, so the name never refers to a segment without a valid
// header (STYLE.md §7's idiom; vfs.WriteFileAtomic cannot preallocate). It
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
	hdr := encodeSegHeader(segHeader{id: id, seed: seed, created: time.Now().UnixNano()})
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
	seg := &segment{id: id, seed: seed, name: name, f: f, size: size, end: segHeaderSize, last: -1}
	steps := []struct {
		what string
		do   func() error
	}{
		{"allocate", func() error { return f.Allocate(0, size) }},
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

// finish runs when the committer stops at Close: if anything was appended
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
