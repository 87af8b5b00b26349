package pagefile

import (
	"fmt"

	"github.com/google/btree"
)

// freeList is the set of free pages as coalesced ranges in a B-tree ordered
// by Start.
//
// Invariants:
//   - ranges never overlap and never touch (adjacent ranges are merged);
//   - every range has Len > 0;
//   - total is the sum of the lengths.
//
// A freeList is not safe for concurrent use; clone returns an O(1)
// copy-on-write snapshot that may be read concurrently with later changes to
// the original.
type freeList struct {
	t     *btree.BTreeG[Range]
	total uint64
}

func rangeLess(a, b Range) bool { return a.Start < b.Start }

func newFreeList() *freeList {
	return &freeList{t: btree.NewG(32, rangeLess)}
}

// clone returns a snapshot in O(1).
func (l *freeList) clone() *freeList {
	return &freeList{t: l.t.Clone(), total: l.total}
}

func (l *freeList) count() uint64 { return l.total }

func (l *freeList) ranges() []Range {
	out := make([]Range, 0, l.t.Len())
	l.t.Ascend(func(r Range) bool {
		out = append(out, r)
		return true
	})
	return out
}

// contains reports whether id is free.
func (l *freeList) contains(id PageID) bool {
	found := false
	l.t.DescendLessOrEqual(Range{Start: id}, func(r Range) bool {
		found = id < r.End()
		return false
	})
	return found
}

// allocate takes the lowest free page.
func (l *freeList) allocate() (PageID, bool) {
	r, ok := l.t.Min()
	if !ok {
		return 0, false
	}
	l.t.Delete(r)
	if r.Len > 1 {
		l.t.ReplaceOrInsert(Range{Start: r.Start + 1, Len: r.Len - 1})
	}
	l.total--
	return r.Start, true
}

// findRun returns the first (lowest) free range of at least n pages.
func (l *freeList) findRun(n uint64) (Range, bool) {
	var got Range
	found := false
	l.t.Ascend(func(r Range) bool {
		if r.Len >= n {
			got, found = r, true
			return false
		}
		return true
	})
	return got, found
}

// allocateRun takes the first (lowest) run of n contiguous free pages.
func (l *freeList) allocateRun(n uint64) (PageID, bool) {
	got, found := l.findRun(n)
	if !found {
		return 0, false
	}
	l.t.Delete(got)
	if got.Len > n {
		l.t.ReplaceOrInsert(Range{Start: got.Start + PageID(n), Len: got.Len - n})
	}
	l.total -= n
	return got.Start, true
}

// tail returns the free range that ends exactly at end, if any (used to
// extend a run at the end of the file).
func (l *freeList) tail(end PageID) (Range, bool) {
	var got Range
	found := false
	l.t.DescendLessOrEqual(Range{Start: end}, func(r Range) bool {
		got, found = r, r.End() == end
		return false
	})
	return got, found
}

// free adds one page, merging with its neighbours. Freeing a free page is
// ErrDoubleFree.
func (l *freeList) free(id PageID) error {
	return l.freeRange(Range{Start: id, Len: 1})
}

// freeRange adds r, merging with its neighbours. Any overlap with a free
// page is ErrDoubleFree and leaves the list unchanged.
func (l *freeList) freeRange(r Range) error {
	var prev, next Range
	hasPrev, hasNext := false, false
	l.t.DescendLessOrEqual(Range{Start: r.Start}, func(p Range) bool {
		prev, hasPrev = p, true
		return false
	})
	l.t.AscendGreaterOrEqual(Range{Start: r.Start + 1}, func(n Range) bool {
		next, hasNext = n, true
		return false
	})
	if hasPrev && prev.End() > r.Start {
		return fmt.Errorf("%w: %v (in free range %d+%d)", ErrDoubleFree, r.Start, uint64(prev.Start), prev.Len)
	}
	if hasNext && next.Start < r.End() {
		return fmt.Errorf("%w: %v (in free range %d+%d)", ErrDoubleFree, next.Start, uint64(next.Start), next.Len)
	}
	merged := r
	if hasPrev && prev.End() == r.Start {
		l.t.Delete(prev)
		merged.Start, merged.Len = prev.Start, prev.Len+merged.Len
	}
	if hasNext && next.Start == r.End() {
		l.t.Delete(next)
		merged.Len += next.Len
	}
	l.t.ReplaceOrInsert(merged)
	l.total += r.Len
	return nil
}
