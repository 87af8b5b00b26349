package journal

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/kdb-project/kdb/vfs"
)

// readChunk is the window size of sequential scans.
const readChunk = 1 << 20

// segment is one segment file.
//
// Invariants:
//   - gone is set (and f closed, set to nil) once the segment is removed or
//     the journal closed. Otherwise f is nil only while the descriptor
//     cache (fds) has closed the segment, which it does only to sealed
//     segments other than the last; readAt opens it again.
//   - Readers hold rw for reading while they use f; whoever closes f or
//     sets it holds rw for writing.
//   - Fields other than rw, f, gone, used and inCache are guarded by
//     Journal.mu; inCache by fds.mu.
type segment struct {
	id   SegmentID
	seed uint64
	name string

	rw   sync.RWMutex
	f    vfs.File
	gone bool
	// removing is set while RemoveBefore removes the segment's file.
	removing atomic.Bool

	// fds is the journal's descriptor cache; used is set by each read (the
	// cache's clock), inCache while the cache may close the segment.
	fds     *fdCache
	used    atomic.Bool
	inCache bool

	size int64 // file size as last known
	end  int64 // offset just past the last acknowledged frame
	// written is the offset just past the last frame this process wrote
	// (under SyncAlways it may pass end until the fdatasync): Read serves
	// records up to it, since a caller refers to a record only once it was
	// written (a NoSync or AckAsync commit is applied, and readable, before
	// it is durable). Iterate and Tail stop at end.
	written int64
	last    int64 // offset of the last acknowledged frame, or -1
	sealed  bool  // ends with a seal record
	// unverified: Open checked only the header (Options.VerifyFrom); end
	// is the file size, last is -1, and the records are verified by
	// verifySegment before Iterate reads them.
	unverified bool
	// prefixEnd, if not zero: Open verified the segment only from the
	// replay position (Options.VerifyFrom), the frame that ends here; the
	// frames before it, from the header, are verified by verifySegment.
	prefixEnd int64
	// tailPrev is the sum of the frame at last (the seed if none): the
	// chain value the next frame links to. Set by Open.
	tailPrev uint64
}

// removed reports whether RemoveBefore removed the segment, or is
// removing it (its file may be gone already: a read that reopens it finds
// nothing).
func (s *segment) removed() bool {
	if s.removing.Load() {
		return true
	}
	s.rw.RLock()
	defer s.rw.RUnlock()
	return s.gone
}

// close closes the segment for good (removed, or the journal closed).
func (s *segment) close() error {
	s.fds.forget(s)
	s.rw.Lock()
	defer s.rw.Unlock()
	s.gone = true
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// readAt reads into p at off, failing with ErrNotFound if the segment was
// removed. A short read is an error wrapping ErrCorrupt and
// io.ErrUnexpectedEOF.
func (s *segment) readAt(p []byte, off int64) error {
	s.rw.RLock()
	if s.f == nil && !s.gone && s.fds != nil {
		s.rw.RUnlock()
		return s.readClosed(p, off)
	}
	defer s.rw.RUnlock()
	if s.f == nil {
		return fmt.Errorf("%w: %s was removed", ErrNotFound, s.id)
	}
	if !s.used.Load() {
		s.used.Store(true)
	}
	return s.readLocked(p, off)
}

// readLocked reads from f, open, with rw held.
func (s *segment) readLocked(p []byte, off int64) error {
	n, err := s.f.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		// The file ends before bytes a record or a reader's size says it
		// holds: cut (damage), not an I/O failure.
		return fmt.Errorf("%w: %s: %d of %d bytes: the segment ends before them (cut short): %w", ErrCorrupt, Location{s.id, off}, n, len(p), io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("journal: read %s: %w", Location{s.id, off}, err)
}

// chunkReader reads a segment sequentially through a window. Windows are
// at most max(readChunk, largest frame) bytes, so the memory it uses is
// bounded by Options, never by bytes read from disk.
type chunkReader struct {
	seg  *segment
	size int64 // bytes of the segment readable through this reader
	buf  []byte
	off  int64 // segment offset of buf[0]
	// keep, if positive, is an offset before the reads to come that a
	// refill keeps in the window when the window can hold both (the first
	// record of a batch still to be delivered), so delivering the batch
	// does not read it again.
	keep int64
}

// at returns the bytes [off, off+n) clipped to size. The slice is valid
// until the next call.
func (r *chunkReader) at(off int64, n int) ([]byte, error) {
	if off >= r.size {
		return nil, nil
	}
	if rem := r.size - off; int64(n) > rem {
		n = int(rem)
	}
	if off >= r.off && off+int64(n) <= r.off+int64(len(r.buf)) {
		return r.buf[off-r.off : off-r.off+int64(n)], nil
	}
	start := off
	if r.keep > 0 && r.keep < off && off+int64(n)-r.keep <= readChunk {
		start = r.keep
	}
	w := max(int(off-start)+n, readChunk)
	if rem := r.size - start; int64(w) > rem {
		w = int(rem)
	}
	if cap(r.buf) < w {
		r.buf = make([]byte, w)
	}
	r.buf = r.buf[:w]
	r.off = start
	if err := r.seg.readAt(r.buf, start); err != nil {
		r.buf = r.buf[:0]
		return nil, err
	}
	return r.buf[off-start : off-start+int64(n)], nil
}

// Read returns the record at loc, verifying its checksum: any record
// written, also one not yet durable (see segment.written). The
// payload is a fresh slice owned by the caller. A Location that is not a
// record of the journal gives ErrNotFound (or ErrCorrupt if it is within
// the journal but does not hold a valid frame). A Location of an internal
// record returns it with its reserved type. Safe for concurrent use.
func (j *Journal) Read(loc Location) (Record, error) {
	return j.ReadInto(loc, nil)
}

// ReadInto is Read with the payload read into buf if it is large enough
// (the returned Payload then aliases buf), else into a new slice. It lets a
// caller that reads many values reuse one buffer.
func (j *Journal) ReadInto(loc Location, buf []byte) (Record, error) {
	seg, end, err := j.segmentFor(loc)
	if err != nil {
		return Record{}, err
	}
	var hdr [recHeaderSize]byte
	if err := seg.readAt(hdr[:], loc.Offset); err != nil {
		return Record{}, err
	}
	h, err := decodeRecHeader(hdr[:], seg.id, loc.Offset, j.opts.readMax(), end-loc.Offset)
	if err != nil {
		if errors.Is(err, ErrTornTail) {
			err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return Record{}, err
	}
	// INVARIANT: h.length <= readMax(), checked by decodeRecHeader.
	var payload []byte
	if cap(buf) >= int(h.length) {
		payload = buf[:h.length]
	} else {
		payload = make([]byte, h.length)
	}
	if err := seg.readAt(payload, loc.Offset+recHeaderSize); err != nil {
		return Record{}, err
	}
	if err := verifyRecord(h, hdr[:], payload, seg.seed, seg.id, loc.Offset); err != nil {
		return Record{}, err
	}
	return Record{Type: h.typ, Payload: payload}, nil
}

// segmentFor returns the segment holding loc and the end of its records
// written.
func (j *Journal) segmentFor(loc Location) (*segment, int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.mu.closed {
		return nil, 0, ErrClosed
	}
	seg := j.findLocked(loc.Segment)
	if seg == nil {
		return nil, 0, fmt.Errorf("%w: %s: no such segment", ErrNotFound, loc)
	}
	end := max(seg.end, seg.written)
	if loc.Offset < segHeaderSize || loc.Offset >= end || loc.Offset%recAlign != 0 {
		return nil, 0, fmt.Errorf("%w: %s: outside the records of the segment", ErrNotFound, loc)
	}
	return seg, end, nil
}

// findLocked returns the segment with the given id, or nil.
//
// The caller must hold j.mu.
func (j *Journal) findLocked(id SegmentID) *segment {
	segs := j.mu.segs
	i := sort.Search(len(segs), func(i int) bool { return segs[i].id >= id })
	if i < len(segs) && segs[i].id == id {
		return segs[i]
	}
	return nil
}

// Iterate calls fn for every user record from `from` (inclusive) up to the
// acknowledged tail at the time of the call, in journal order, verifying
// checksums and the chain. from is a Location returned by Append or
// Iterate, the zero Location (the start of the journal), or the offset 0 of
// a segment (its start). Batches are delivered whole: the records of a
// batch are verified before the first of them is passed to fn. Regions
// skipped by Open (OpenReport.Skipped) are skipped again. Internal records
// are not delivered. The payload passed to fn is valid only until fn returns
// (it aliases Iterate's read buffer): copy it to keep it. Segments that
// Open left unverified (Options.VerifyFrom)
// are verified whole first. If fn returns an error, Iterate stops and
// returns it.
// If RemoveBefore removes a segment Iterate still has to read, Iterate
// returns an error wrapping ErrNotFound.
func (j *Journal) Iterate(from Location, fn func(loc Location, r Record) error) error {
	type span struct {
		seg *segment
		end int64
	}
	if err := j.verifySegments(from.Segment, false); err != nil {
		return err
	}
	j.mu.Lock()
	if j.mu.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	var spans []span
	for _, s := range j.mu.segs {
		if s.id >= from.Segment {
			spans = append(spans, span{s, s.end})
		}
	}
	skipped := append([]Damage(nil), j.mu.skipped...)
	first := SegmentID(0)
	if len(j.mu.segs) > 0 {
		first = j.mu.segs[0].id
	}
	j.mu.Unlock()
	if !from.IsZero() && (from.Segment < first || len(spans) == 0 || spans[0].seg.id != from.Segment) {
		return fmt.Errorf("%w: %s: no such segment", ErrNotFound, from)
	}
	type pending struct { // a record of the batch being verified
		loc Location
		typ RecordType
		n   int // payload length
	}
	var batch []pending
	for i, sp := range spans {
		seg := sp.seg
		off := int64(segHeaderSize)
		if i == 0 && from.Offset > off {
			off = from.Offset
		}
		r := &chunkReader{seg: seg, size: sp.end}
		prev, prevKnown := seg.seed, off == segHeaderSize
		batch = batch[:0]
		for off < sp.end {
			if d, ok := skipAt(skipped, seg.id, off); ok {
				off, prevKnown, batch = d.To.Offset, false, batch[:0]
				continue
			}
			hb, err := r.at(off, recHeaderSize)
			if err != nil {
				return err
			}
			h, err := decodeRecHeader(hb, seg.id, off, j.opts.readMax(), sp.end-off)
			if err != nil {
				if errors.Is(err, ErrTornTail) {
					err = fmt.Errorf("%w: %w", ErrCorrupt, err)
				}
				return err
			}
			var hdr [recHeaderSize]byte
			copy(hdr[:], hb)
			pb, err := r.at(off+recHeaderSize, int(h.length))
			if err != nil {
				return err
			}
			if err := verifyRecord(h, hdr[:], pb, seg.seed, seg.id, off); err != nil {
				return err
			}
			loc := Location{seg.id, off}
			if prevKnown && h.prev != prev {
				return fmt.Errorf("%w: %s: checksum chain broken", ErrCorrupt, loc)
			}
			prev, prevKnown = h.sum, true
			if h.flags&flagBatchBegin != 0 && len(batch) > 0 {
				return fmt.Errorf("%w: %s: batch begins inside another batch", ErrCorrupt, loc)
			}
			if h.typ < MinReservedType {
				batch = append(batch, pending{loc, h.typ, int(h.length)})
			}
			off += frameSize(int(h.length))
			if h.flags&flagBatchEnd != 0 {
				// The batch verified: deliver its payloads from the
				// reader's window (read again only if the batch spans
				// windows), without a copy.
				for _, p := range batch {
					pb, err := r.at(p.loc.Offset+recHeaderSize, p.n)
					if err != nil {
						return err
					}
					if err := fn(p.loc, Record{Type: p.typ, Payload: pb}); err != nil {
						return err
					}
				}
				batch = batch[:0]
			}
		}
		if len(batch) > 0 {
			return fmt.Errorf("%w: %s: batch not ended at the end of the acknowledged records", ErrCorrupt, Location{seg.id, sp.end})
		}
	}
	return nil
}

// skipAt returns the damaged region of seg starting at off, if any.
func skipAt(skipped []Damage, seg SegmentID, off int64) (Damage, bool) {
	for _, d := range skipped {
		if d.From.Segment == seg && d.From.Offset <= off && off < d.To.Offset {
			return d, true
		}
	}
	return Damage{}, false
}
