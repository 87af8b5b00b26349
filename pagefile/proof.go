package pagefile

import (
	"errors"
	"fmt"
	"io"
)

// The proof of a loaded free list.
//
// db.free is trusted when it is intact and its store ID, checkpoint ID and
// page count match the meta, but such a file can still list a page in use
// (a bug, a bad tool, a restored backup mixing files). So the pages of a
// list loaded from db.free (or db.free.prev) are kept apart, in mu.unproven
// (a subset of mu.free), and each is proven free on disk before it is handed
// out, written or freed: a checkpoint writes every freed page stamped
// PageFree, so a page is proven free exactly when its image in db.data (or
// in the db.redo overlay of a read-only handle) has an intact checksum, its
// own ID and type PageFree. Pages freed since Open are free in memory and
// never need the proof.
//
// A page that fails the proof is never written: it is dropped from the free
// list (it belongs to someone), the rest of the loaded list is no longer
// trusted and moves to mu.quarantine (held out of allocation, so that
// allocation goes on from the pages freed since Open and from the end of the
// file), and a background goroutine proves the quarantined pages one by one,
// giving back those that are stamped PageFree and dropping the others. Until
// it is done, checkpoints remove db.free and db.free.prev instead of writing
// them, so that a crash meanwhile makes the next Open rebuild the list by a
// scan.

// testProofGate, if set (tests only, not in parallel, before any File
// opens), runs before each batch of the background proof.
var testProofGate func()

// proveBatch is how many quarantined pages the background proof reads
// under one read lock.
const proveBatch = 256

// FreeListProof counts the proofs of a free list loaded from db.free since
// Open.
type FreeListProof struct {
	// Proven counts the pages of the loaded list proven free on disk before
	// their first use (and those the background proof gave back).
	Proven uint64
	// Lies counts the pages the loaded list called free that are not: their
	// image in db.data is not an intact PageFree page. None was written.
	Lies uint64
	// FirstLie is the first page that failed the proof (0: none) and
	// LieReason what its image held.
	FirstLie  PageID
	LieReason string
	// Unproven is the number of loaded pages not yet proven and still
	// allocatable; Quarantined the number held out of allocation after a
	// lie, waiting for the background proof.
	Unproven, Quarantined uint64
}

// FreeListProof returns the proof counters of the loaded free list.
func (f *File) FreeListProof() FreeListProof {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p := f.mu.proof
	if f.mu.unproven != nil {
		p.Unproven = f.mu.unproven.count()
	}
	if f.mu.quarantine != nil {
		p.Quarantined = f.mu.quarantine.count()
	}
	return p
}

// errNotFree marks a failed proof: the page's image is not an intact
// PageFree page (or is not there at all).
var errNotFree = errors.New("not stamped free")

// errBeyondEnd marks (with errNotFree) a page beyond the end of db.data: a
// cut page file, not a page in use.
var errBeyondEnd = errors.New("beyond the end of the file")

// proveFree returns nil if page id is stamped free on disk: its image (the
// db.redo overlay of a read-only handle, else db.data) has an intact
// checksum, its own ID and type PageFree. If it is not, the error wraps
// errNotFree and says what the page holds; any other error is an I/O error
// that proves nothing either way. It reads one page.
//
// The caller must hold f.mu (read or write).
func (f *File) proveFree(id PageID) error {
	ps := int64(f.pageSize)
	off := int64(id) * ps
	b, name := f.mu.overlay[id], f.redoName
	if b == nil {
		name = f.dataName
		if v := f.mu.view; v != nil && v.mm != nil && off+ps <= v.valid.Load() {
			b = v.mm[off : off+ps : off+ps]
		} else {
			b = make([]byte, ps)
			if err := readFull(f.data, b, off); errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("%w: %s@%d: %v: %w", errNotFree, f.dataName, off, id, errBeyondEnd)
			} else if err != nil {
				return fmt.Errorf("pagefile: read %s@%d: %v: %w", f.dataName, off, id, err)
			}
		}
	}
	h, err := decodePage(b, id, name, off)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotFree, err)
	}
	if h.typ != PageFree {
		return fmt.Errorf("%w: %s@%d: %v holds a page of type %d written at checkpoint %d", errNotFree, name, off, id, h.typ, h.checkpoint)
	}
	return nil
}

// proveLocked proves the loaded pages of r (those still in mu.unproven)
// before the caller uses them. On success they are no longer unproven and
// it returns true. If one fails, the lie is recorded (lieLocked) and it
// returns false: nothing of r may be used. An I/O error is returned with
// nothing changed.
//
// The caller must hold f.mu for writing.
func (f *File) proveLocked(r Range) (bool, error) {
	if f.mu.unproven == nil {
		return true, nil
	}
	parts := f.mu.unproven.overlap(r)
	for _, p := range parts {
		for id := p.Start; id < p.End(); id++ {
			if err := f.proveFree(id); errors.Is(err, errNotFree) {
				f.lieLocked(id, err)
				return false, nil
			} else if err != nil {
				return false, err
			}
		}
	}
	for _, p := range parts {
		f.mu.unproven.remove(p)
		f.mu.proof.Proven += p.Len
	}
	if f.mu.unproven.count() == 0 {
		f.mu.unproven = nil
	}
	return true, nil
}

// lieLocked records that the loaded page id is not free (err says what it
// holds): id leaves the free list for good, the rest of the loaded list
// moves to the quarantine, and the background proof starts.
//
// The caller must hold f.mu for writing; id must be in mu.unproven (and so
// in mu.free) or in mu.quarantine.
func (f *File) lieLocked(id PageID, err error) {
	f.mu.proof.Lies++
	if f.mu.proof.FirstLie == 0 {
		f.mu.proof.FirstLie, f.mu.proof.LieReason = id, err.Error()
	}
	if f.mu.proof.Lies == 1 {
		// The first lie is logged in full; the background proof logs
		// the count when it is done.
		f.mu.lieLog = append(f.mu.lieLog, lieEvent{id: id, err: err})
	}
	if f.mu.quarantine != nil && f.mu.quarantine.contains(id) {
		f.dequarantineLocked(id)
		return
	}
	u := f.mu.unproven
	f.mu.unproven = nil
	if u == nil {
		return
	}
	u.t.Ascend(func(r Range) bool {
		f.mu.free.remove(r)
		return true
	})
	u.remove(Range{Start: id, Len: 1})
	if f.mu.quarantine == nil {
		f.mu.quarantine = newFreeList()
	}
	u.t.Ascend(func(r Range) bool {
		_ = f.mu.quarantine.freeRange(r) // disjoint: both come from the loaded list
		return true
	})
	if f.mu.quarantine.count() == 0 {
		f.mu.quarantine = nil
		return
	}
	if !f.proving && !f.proofStop.Load() {
		f.proving = true
		f.proofWG.Add(1)
		go f.proveQuarantine()
	}
}

// claimLocked is called before page id is written or freed by its owner.
// If the loaded list holds it and it is not stamped free on disk, the list
// lied about it (lieLocked) and id leaves the free list; if it is stamped
// free, it stays free and the caller refuses the change as for any free
// page. If it is quarantined, it is in use (the list lied about it too)
// and leaves the quarantine. An I/O error is returned with nothing
// changed.
//
// The caller must hold f.mu for writing.
func (f *File) claimLocked(id PageID) error {
	if f.mu.unproven != nil && f.mu.unproven.contains(id) {
		err := f.proveFree(id)
		if errors.Is(err, errNotFree) {
			f.lieLocked(id, err)
			return nil
		}
		return err
	}
	if f.mu.quarantine != nil && f.mu.quarantine.contains(id) {
		f.lieLocked(id, fmt.Errorf("%w: %v: written or freed by its owner", errNotFree, id))
	}
	return nil
}

// dequarantineLocked takes id out of the quarantine (which holds it).
//
// The caller must hold f.mu for writing.
func (f *File) dequarantineLocked(id PageID) {
	f.mu.quarantine.remove(Range{Start: id, Len: 1})
	if f.mu.quarantine.count() == 0 {
		f.mu.quarantine = nil
	}
}

// lieEvent is a failed proof waiting to be logged once f.mu is released.
type lieEvent struct {
	id  PageID
	err error
}

// unlockAndLog releases f.mu (held for writing) and logs the failed proofs
// recorded under it.
func (f *File) unlockAndLog() {
	evs := f.mu.lieLog
	f.mu.lieLog = nil
	f.mu.Unlock()
	for _, e := range evs {
		f.opts.Logger.Error("pagefile: the free list loaded from db.free listed a page in use; the page is not written and the rest of the list is proven in the background",
			"page", uint64(e.id), "err", e.err)
	}
}

// proveQuarantine is the background proof: it proves the quarantined pages
// in batches (read under a read lock), gives back to the free list those
// stamped PageFree and drops the others, until the quarantine is empty or
// the File closes.
func (f *File) proveQuarantine() {
	defer f.proofWG.Done()
	type result struct {
		id  PageID
		err error
	}
	res := make([]result, 0, proveBatch)
	var ioErr error
	for {
		if testProofGate != nil {
			testProofGate()
		}
		res = res[:0]
		f.mu.RLock()
		if f.mu.closed || f.proofStop.Load() {
			f.mu.RUnlock()
			f.mu.Lock()
			f.proving = false
			f.proofDone.Broadcast()
			f.mu.Unlock()
			return
		}
		if q := f.mu.quarantine; q != nil {
			q.t.Ascend(func(r Range) bool {
				for id := r.Start; id < r.End() && len(res) < proveBatch; id++ {
					res = append(res, result{id, f.proveFree(id)})
				}
				return len(res) < proveBatch
			})
		}
		f.mu.RUnlock()

		f.mu.Lock()
		for _, r := range res {
			// A page written or freed meanwhile left the quarantine: its
			// owner spoke.
			if f.mu.quarantine == nil || !f.mu.quarantine.contains(r.id) {
				continue
			}
			if errors.Is(r.err, errNotFree) {
				f.lieLocked(r.id, r.err)
				continue
			}
			if r.err != nil {
				// Proves nothing: the page stays quarantined (and db.free
				// unwritten) for the rest of this handle's life; the next
				// Open scans.
				ioErr = r.err
				continue
			}
			f.dequarantineLocked(r.id)
			_ = f.mu.free.free(r.id) // not free: it was quarantined
			f.mu.proof.Proven++
		}
		done := f.mu.quarantine == nil || ioErr != nil
		p := f.mu.proof
		if done {
			f.proving = false
			f.proofErr = ioErr
			f.proofDone.Broadcast()
		}
		f.unlockAndLog()
		if done && ioErr == nil {
			f.opts.Logger.Warn("pagefile: the free list is rebuilt: the pages set aside after its lie are proven",
				"lies", p.Lies, "proven", p.Proven, "first_lie", uint64(p.FirstLie))
		}
		if ioErr != nil {
			f.opts.Logger.Error("pagefile: the background proof of the free list stopped; the next Open rebuilds it by a scan", "err", ioErr)
		}
		if done {
			return
		}
	}
}

// WaitFreeListProof waits until the background proof that follows a lie
// of the loaded free list has finished (at once if none runs), so that
// FreeRanges is exact again: until then the quarantined pages are neither
// on the free list nor known to be in use. It returns the read error that
// stopped the proof, if one did: then the pages still set aside stay so
// for this handle's life, neither free nor known to be in use.
func (f *File) WaitFreeListProof() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.proving {
		f.proofDone.Wait()
	}
	return f.proofErr
}

// stopProof stops the background proof and waits for it. Set under f.mu,
// proofStop keeps lieLocked from starting another one.
func (f *File) stopProof() {
	f.mu.Lock()
	f.proofStop.Store(true)
	f.mu.Unlock()
	f.proofWG.Wait()
}

// overlap returns the parts of l within r, in order.
func (l *freeList) overlap(r Range) []Range {
	var out []Range
	add := func(x Range) {
		s, e := max(x.Start, r.Start), min(x.End(), r.End())
		if s < e {
			out = append(out, Range{Start: s, Len: uint64(e - s)})
		}
	}
	l.t.DescendLessOrEqual(Range{Start: r.Start}, func(x Range) bool {
		add(x)
		return false
	})
	l.t.AscendRange(Range{Start: r.Start + 1}, Range{Start: r.End()}, func(x Range) bool {
		add(x)
		return true
	})
	return out
}

// remove takes the pages of r out of l (those of r that l holds).
func (l *freeList) remove(r Range) {
	var hit []Range
	l.t.DescendLessOrEqual(Range{Start: r.Start}, func(x Range) bool {
		if x.End() > r.Start {
			hit = append(hit, x)
		}
		return false
	})
	l.t.AscendRange(Range{Start: r.Start + 1}, Range{Start: r.End()}, func(x Range) bool {
		hit = append(hit, x)
		return true
	})
	for _, x := range hit {
		l.t.Delete(x)
		s, e := max(x.Start, r.Start), min(x.End(), r.End())
		l.total -= uint64(e - s)
		if x.Start < s {
			l.t.ReplaceOrInsert(Range{Start: x.Start, Len: uint64(s - x.Start)})
		}
		if e < x.End() {
			l.t.ReplaceOrInsert(Range{Start: e, Len: uint64(x.End() - e)})
		}
	}
}
