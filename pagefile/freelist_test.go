package pagefile

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkFreeList asserts the freeList invariants and returns its ranges.
func checkFreeList(t *testing.T, l *freeList) []Range {
	t.Helper()
	rs := l.ranges()
	var total uint64
	for i, r := range rs {
		if r.Len == 0 {
			t.Fatalf("empty range %v", r)
		}
		if i > 0 && rs[i-1].End() >= r.Start {
			t.Fatalf("ranges %v and %v overlap or touch", rs[i-1], r)
		}
		total += r.Len
	}
	if total != l.count() {
		t.Fatalf("count %d, ranges sum to %d", l.count(), total)
	}
	return rs
}

func TestFreeList_FreeCoalesces(t *testing.T) {
	tests := []struct {
		name  string
		frees []PageID
		want  []Range
	}{
		{"single", []PageID{5}, []Range{{5, 1}}},
		{"ascending", []PageID{5, 6, 7}, []Range{{5, 3}}},
		{"descending", []PageID{7, 6, 5}, []Range{{5, 3}}},
		{"bridge", []PageID{5, 7, 6}, []Range{{5, 3}}},
		{"gaps", []PageID{3, 5, 9}, []Range{{3, 1}, {5, 1}, {9, 1}}},
		{"bridge two runs", []PageID{3, 4, 6, 7, 5}, []Range{{3, 5}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newFreeList()
			for _, id := range tc.frees {
				if err := l.free(id); err != nil {
					t.Fatalf("free(%v): %v", id, err)
				}
			}
			if got := checkFreeList(t, l); !slices.Equal(got, tc.want) {
				t.Fatalf("ranges %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFreeList_DoubleFree(t *testing.T) {
	l := newFreeList()
	for _, id := range []PageID{5, 6, 7, 10} {
		if err := l.free(id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []PageID{5, 6, 7, 10} {
		if err := l.free(id); !errors.Is(err, ErrDoubleFree) {
			t.Fatalf("free(%v) again: %v, want ErrDoubleFree", id, err)
		}
	}
	if err := l.freeRange(Range{8, 3}); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("freeRange overlapping 10: %v", err)
	}
	if got := checkFreeList(t, l); !slices.Equal(got, []Range{{5, 3}, {10, 1}}) {
		t.Fatalf("list changed by a failed free: %v", got)
	}
}

func TestFreeList_AllocateLowestAndRuns(t *testing.T) {
	l := newFreeList()
	for _, r := range []Range{{3, 2}, {10, 5}, {20, 3}} {
		if err := l.freeRange(r); err != nil {
			t.Fatal(err)
		}
	}
	if id, ok := l.allocate(); !ok || id != 3 {
		t.Fatalf("allocate = %v %v, want 3", id, ok)
	}
	if id, ok := l.allocateRun(3); !ok || id != 10 {
		t.Fatalf("allocateRun(3) = %v %v, want 10", id, ok)
	}
	if id, ok := l.allocateRun(3); !ok || id != 20 {
		t.Fatalf("allocateRun(3) = %v %v, want 20", id, ok)
	}
	if _, ok := l.allocateRun(3); ok {
		t.Fatalf("allocateRun(3) succeeded with ranges %v", l.ranges())
	}
	if got := checkFreeList(t, l); !slices.Equal(got, []Range{{4, 1}, {13, 2}}) {
		t.Fatalf("ranges %v", got)
	}
	if r, ok := l.tail(15); !ok || r != (Range{13, 2}) {
		t.Fatalf("tail(15) = %v %v", r, ok)
	}
	l.remove(Range{13, 2})
	if _, ok := l.tail(15); ok {
		t.Fatal("tail after remove")
	}
	if got := checkFreeList(t, l); !slices.Equal(got, []Range{{4, 1}}) {
		t.Fatalf("ranges %v", got)
	}
}

func TestFreeList_CloneIsolated(t *testing.T) {
	l := newFreeList()
	for id := PageID(3); id < 1000; id += 2 {
		if err := l.free(id); err != nil {
			t.Fatal(err)
		}
	}
	snap := l.clone()
	want := l.ranges()
	for id := PageID(4); id < 1000; id += 2 {
		if err := l.free(id); err != nil {
			t.Fatal(err)
		}
	}
	if got := checkFreeList(t, snap); !slices.Equal(got, want) {
		t.Fatal("the clone changed with the original")
	}
	if got := checkFreeList(t, l); len(got) != 1 || got[0] != (Range{3, 997}) {
		t.Fatalf("original %v", got)
	}
}

// TestFreeList_Model runs random operations against a map model.
func TestFreeList_Model(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	l := newFreeList()
	model := map[PageID]bool{}
	for i := 0; i < 20000; i++ {
		id := PageID(3 + rng.IntN(300))
		switch rng.IntN(3) {
		case 0, 1:
			err := l.free(id)
			if model[id] != errors.Is(err, ErrDoubleFree) || (!model[id] && err != nil) {
				t.Fatalf("free(%v) = %v, model free=%v", id, err, model[id])
			}
			model[id] = true
		case 2:
			got, ok := l.allocate()
			var want PageID
			for p := range model {
				if model[p] && (want == 0 || p < want) {
					want = p
				}
			}
			if ok != (want != 0) || got != want {
				t.Fatalf("allocate = %v %v, want %v", got, ok, want)
			}
			if ok {
				delete(model, got)
			}
		}
		if l.contains(id) != model[id] {
			t.Fatalf("contains(%v) = %v", id, !model[id])
		}
	}
	checkFreeList(t, l)
}
