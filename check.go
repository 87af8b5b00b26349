package kdb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
)

// CheckReport is what Check found.
type CheckReport struct {
	Indexes        int    // user indexes
	Keys           uint64 // keys in all trees, the engine's own included
	Pages          uint64 // pages in db.data
	ReachablePages uint64 // pages reachable from the index root
	FreePages      uint64 // pages on the free list
	JournalValues  uint64 // values kept in the journal, each read and verified
	// UnreadableValues counts the values kept in the journal that could
	// not be read back intact (journal damage): the keys that lost their
	// value. Check's error names the first of them.
	UnreadableValues uint64
	Depth            int // largest tree depth (1: a root that is a leaf)
	// DamagedPages counts the pages that are neither reachable nor free
	// and fail their checksum: damaged on disk, but holding nothing of the
	// index (free pages a free-list scan or proof set aside; the scan of a
	// writable open frees them again). Not a problem: nothing is lost.
	// FirstDamagedPage is the first (0: none), DamagedReason why.
	DamagedPages     uint64
	FirstDamagedPage uint64 // the first damaged page (0: none)
	DamagedReason    string // why FirstDamagedPage is damaged
}

// Check verifies the whole store: the index (page checksums, B-tree order and
// bounds, equal depth, reachable and free pages covering every page exactly
// once), every journal segment (each record's checksum and the chain; Open
// verified only those from the replay position), every value kept in the
// journal (readable, checksum intact, of the recorded length) and the
// per-segment reference counts against a recount. What a layer keeps in a
// namespace is the layer's to check (the broker package's Check).
// Problems come back as an error wrapping ErrCorrupt.
func (db *DB) Check() (*CheckReport, error) {
	return db.CheckProgress(nil)
}

// CheckProgress is Check that reports its progress (if progress is not nil):
// phase "index pages" with the pages checked so far, then phase "keys" with
// the keys walked so far, every 1,024.
func (db *DB) CheckProgress(progress func(phase string, done uint64)) (*CheckReport, error) {
	rep, err := db.checkProgress(progress)
	return rep, db.staleOr(err)
}

func (db *DB) checkProgress(progress func(phase string, done uint64)) (*CheckReport, error) {
	var pagesFn func(uint64)
	if progress != nil {
		pagesFn = func(n uint64) { progress("index pages", n) }
	}
	// After a lie of the loaded free list, pages set aside wait for the
	// background proof: neither free nor known in use, they would look
	// leaked.
	if err := db.pf.WaitFreeListProof(); err != nil {
		// Not damage: the pages it set aside would look leaked.
		return nil, fmt.Errorf("kdb: check: the background proof of the free list stopped on a read error, so the pages it set aside cannot be told from leaked ones (the next Open scans): %w", err)
	}
	// Inside a View: Close keeps the page file mapped until the last
	// running View returns, and the index check reads page slices of the
	// mapping (run outside one, a Close meanwhile unmapped them: SIGSEGV).
	var irep *index.CheckReport
	err := db.View(func(*Snapshot) error {
		var err error
		irep, err = db.ix.CheckProgress(pagesFn)
		return err
	})
	if err != nil {
		return nil, wrapErr(err)
	}
	// Open verified the journal only from the replay position. Damage
	// found there does not stop the check: the walk below names the values
	// it took (each read again), so that an operator learns which keys
	// lost what, not only where the journal is damaged.
	jerr := db.j.Verify()
	if jerr != nil && !errors.Is(wrapErr(jerr), ErrCorrupt) {
		return nil, wrapErr(jerr) // I/O, not damage: nothing to go on with
	}
	var lost []string // the first unreadable values: tree, key, location
	rep := &CheckReport{
		Keys: irep.Keys, Pages: irep.PageCount, ReachablePages: irep.ReachablePages,
		FreePages: irep.FreePages, Depth: irep.Depth,
		DamagedPages: irep.DamagedPages, FirstDamagedPage: uint64(irep.FirstDamaged), DamagedReason: irep.DamagedReason,
	}
	counted := map[journal.SegmentID]refs{}
	var stored map[journal.SegmentID]refs
	var walked uint64
	err = db.View(func(s *Snapshot) error {
		names, err := s.trees()
		if err != nil {
			return err
		}
		for _, name := range names {
			if string(name) != segRefsTree {
				// The trees replay accepts (record.go, checkTreeName).
				if err := checkTreeName(name); err != nil {
					return fmt.Errorf("%w: %v", ErrCorrupt, err)
				}
				if bytes.HasPrefix(name, []byte(userTreePrefix)) {
					rep.Indexes++
				}
			}
			t, err := s.openTree(name)
			if err != nil {
				return err
			}
			if t == nil {
				return fmt.Errorf("%w: tree %q listed but missing", ErrCorrupt, name)
			}
			if string(name) == segRefsTree {
				if stored, err = readSegRefs(t); err != nil {
					return err
				}
				continue
			}
			c := t.cursor()
			var n uint64
			for k, v, ok := c.first(); ok; k, v, ok = c.next() {
				n++
				if walked++; progress != nil && walked%1024 == 0 {
					progress("keys", walked)
				}
				if len(v) == 0 || v[0] > valJournal {
					return fmt.Errorf("%w: tree %q key %q: bad value tag", ErrCorrupt, name, k)
				}
				if v[0] != valJournal {
					continue
				}
				seg, size, isRef := decodeRefHeader(v)
				if !isRef {
					return fmt.Errorf("%w: tree %q key %q: bad journal reference", ErrCorrupt, name, k)
				}
				if _, err := db.resolve(v); errors.Is(err, ErrCorrupt) {
					if rep.UnreadableValues++; len(lost) < maxLostListed {
						loc := journal.Location{Segment: seg, Offset: int64(binary.LittleEndian.Uint64(v[5:]))}
						lost = append(lost, fmt.Sprintf("tree %q key %q (%s)", name, k, loc))
					}
				} else if err != nil {
					return fmt.Errorf("tree %q key %q: %w", name, k, err)
				} else {
					rep.JournalValues++
				}
				r := counted[seg] // recorded for the lost ones too
				r.count++
				r.bytes += uint64(size)
				counted[seg] = r
			}
			if c.err != nil {
				return c.err
			}
			if n != t.count {
				return fmt.Errorf("%w: tree %q holds %d keys, its count says %d", ErrCorrupt, name, n, t.count)
			}
		}
		return nil
	})
	if err != nil {
		return rep, wrapErr(err)
	}
	rep.Keys = walked + uint64(len(stored)) // the mem tables' changes included
	if len(stored) != len(counted) {
		return rep, fmt.Errorf("%w: segment references: %d segments recorded, %d counted", ErrCorrupt, len(stored), len(counted))
	}
	for seg, c := range counted {
		if stored[seg] != c {
			return rep, fmt.Errorf("%w: segment references of %s: recorded %+v, counted %+v", ErrCorrupt, seg, stored[seg], c)
		}
	}
	if rep.UnreadableValues > 0 {
		more := ""
		if n := rep.UnreadableValues - uint64(len(lost)); n > 0 {
			more = fmt.Sprintf("; %d more", n)
		}
		what := fmt.Sprintf("%d values kept in the journal cannot be read: %s%s", rep.UnreadableValues, strings.Join(lost, ", "), more)
		if jerr != nil {
			return rep, fmt.Errorf("%w; %s", wrapErr(jerr), what)
		}
		return rep, fmt.Errorf("%w: %s", ErrCorrupt, what)
	}
	if jerr != nil {
		return rep, wrapErr(jerr) // damage no value of the index refers to
	}
	return rep, nil
}

// maxLostListed bounds the unreadable values a Check error names.
const maxLostListed = 10

// refs counts the values a journal segment holds for the index.
type refs struct{ count, bytes uint64 }

func readSegRefs(t *snapTree) (map[journal.SegmentID]refs, error) {
	out := map[journal.SegmentID]refs{}
	c := t.cursor()
	for k, v, ok := c.first(); ok; k, v, ok = c.next() {
		if len(k) != 4 || len(v) != 16 {
			return nil, fmt.Errorf("%w: segment refs entry of %d+%d bytes", ErrCorrupt, len(k), len(v))
		}
		out[journal.SegmentID(binary.BigEndian.Uint32(k))] = refs{binary.LittleEndian.Uint64(v), binary.LittleEndian.Uint64(v[8:])}
	}
	return out, c.err
}
