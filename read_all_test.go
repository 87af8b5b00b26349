package kdb_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/kdb-project/kdb"
)

func allKey(i int) []byte { return fmt.Appendf(nil, "k%04d", i) }

// allValue is empty for some keys, above the journal threshold for others.
func allValue(i int) []byte {
	switch i % 5 {
	case 0:
		return []byte{}
	case 1:
		return bytes.Repeat(fmt.Appendf(nil, "big-%d;", i), 200)
	}
	return fmt.Appendf(nil, "v%d", i)
}

func openAll(t *testing.T, n int, opts *kdb.Options) *kdb.DB {
	t.Helper()
	db, err := kdb.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	b := kdb.NewBatch()
	for i := 0; i < n; i++ {
		b.Put("all", allKey(i), allValue(i))
	}
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	return db
}

func TestIter_All(t *testing.T) {
	const n = 300
	db := openAll(t, n, nil)
	defer db.Close()
	err := db.View(func(s *kdb.Snapshot) error {
		it := s.Iter("all")
		i := 0
		for k, v := range it.All() {
			if !bytes.Equal(k, allKey(i)) || !bytes.Equal(v, allValue(i)) {
				t.Fatalf("entry %d: %q = %.20q, want %q = %.20q", i, k, v, allKey(i), allValue(i))
			}
			if v == nil {
				t.Fatalf("entry %d: nil value", i)
			}
			i++
		}
		if i != n || it.Err() != nil {
			t.Fatalf("All yielded %d entries, err %v; want %d", i, it.Err(), n)
		}

		// Breaking out early: the loop body is not called again (the
		// runtime panics if All ignored yield's false), the iterator stays
		// on the last key yielded and Next goes on from there.
		i = 0
		for k := range it.All() {
			if !bytes.Equal(k, allKey(i)) {
				t.Fatalf("second range, entry %d: %q", i, k)
			}
			if i == 10 {
				break
			}
			i++
		}
		if !bytes.Equal(it.Key(), allKey(10)) || !it.Next() || !bytes.Equal(it.Key(), allKey(11)) {
			t.Fatalf("after break at 10: key %q", it.Key())
		}
		// Ranging again starts over from the first key.
		for k := range it.All() {
			if !bytes.Equal(k, allKey(0)) {
				t.Fatalf("third range starts at %q", k)
			}
			break
		}

		// A missing index yields nothing and no error.
		none := s.Iter("missing")
		for k := range none.All() {
			t.Fatalf("missing index yielded %q", k)
		}
		if none.Err() != nil {
			t.Fatalf("missing index: %v", none.Err())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestIter_AllAfterView: an iterator kept past its View yields nothing and
// Err says why.
func TestIter_AllAfterView(t *testing.T) {
	db := openAll(t, 10, nil)
	defer db.Close()
	var it *kdb.Iter
	if err := db.View(func(s *kdb.Snapshot) error { it = s.Iter("all"); return nil }); err != nil {
		t.Fatal(err)
	}
	for k := range it.All() {
		t.Fatalf("yielded %q after the View", k)
	}
	if !errors.Is(it.Err(), kdb.ErrInvalid) {
		t.Fatalf("Err = %v, want ErrInvalid", it.Err())
	}
}

// TestIter_AllStopsOnError: when Close gives up waiting for the View in
// the middle of a range, the sequence ends without yielding anything more
// and Err is ErrClosed.
func TestIter_AllStopsOnError(t *testing.T) {
	const n = 100
	db := openAll(t, n, &kdb.Options{CloseWait: -1})
	var closeErr error
	seen := 0
	err := db.View(func(s *kdb.Snapshot) error {
		it := s.Iter("all")
		for k := range it.All() {
			if k == nil {
				t.Fatalf("nil key yielded at %d", seen)
			}
			seen++
			if seen == 20 {
				closed := make(chan error)
				go func() { closed <- db.Close() }()
				closeErr = <-closed
			}
		}
		return it.Err()
	})
	if closeErr != nil {
		t.Fatal(closeErr)
	}
	if seen != 20 || !errors.Is(err, kdb.ErrClosed) {
		t.Fatalf("yielded %d entries (want 20), View: %v (want ErrClosed)", seen, err)
	}
}

// TestIter_AllStopsAtUnreadableValue: a value that cannot be read (its
// journal segment is missing, opened with SkipDamagedJournal) ends the
// sequence before that entry, and Err says why.
func TestIter_AllStopsAtUnreadableValue(t *testing.T) {
	mem := segStore(t, 200, 1000, 0)
	ids := segIDs(t, mem)
	if len(ids) < 3 {
		t.Fatalf("%d segments, want 3 or more", len(ids))
	}
	mem.Remove("/db/" + ids[1].String())
	o := segOpts(mem)
	o.SkipDamagedJournal = true
	db, err := kdb.Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	firstLost := -1
	for i := 0; i < 200 && firstLost < 0; i++ {
		if _, err := db.Get("ix", fmt.Appendf(nil, "k%05d", i)); errors.Is(err, kdb.ErrCorrupt) {
			firstLost = i
		}
	}
	if firstLost <= 0 {
		t.Fatalf("first lost value at %d, want one after the first key", firstLost)
	}
	seen := 0
	err = db.View(func(s *kdb.Snapshot) error {
		it := s.Iter("ix")
		for k, v := range it.All() {
			if want := fmt.Appendf(nil, "k%05d", seen); !bytes.Equal(k, want) || len(v) != 1000 {
				t.Fatalf("entry %d: %q, %d bytes", seen, k, len(v))
			}
			seen++
		}
		return it.Err()
	})
	if seen != firstLost || !errors.Is(err, kdb.ErrCorrupt) {
		t.Fatalf("yielded %d entries (the first lost value is key %d), err %v (want ErrCorrupt)", seen, firstLost, err)
	}
}
