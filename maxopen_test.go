package kdb

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// A store whose values live in ~50 journal segments, reopened with
// MaxOpenSegments 2: every value reads right from concurrent readers
// while a writer goes on, and the journal never holds more than a few
// segment descriptors (before, one per live segment: a store with a large
// backlog could not open under a low descriptor limit).
func TestDB_MaxOpenSegments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var open, peak atomic.Int64
	fsys := vfs.Intercept(vfs.OS, func(e vfs.Event) error {
		if !strings.Contains(e.Path, ".log") {
			return nil
		}
		switch e.Op {
		case vfs.OpOpen:
			if n := open.Add(1); n > peak.Load() {
				peak.Store(n)
			}
		case vfs.OpClose:
			open.Add(-1)
		}
		return nil
	})
	o := &Options{FS: fsys, SegmentSize: 64 << 10, MaxOpenSegments: 2}
	val := func(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 500) } // journal-resident
	db, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	for i := range n {
		if err := db.Put("t", fmt.Appendf(nil, "k%05d", i), val(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	peak.Store(0)
	if db, err = Open(dir, o); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if segs := db.Stats().JournalSegments; segs < 40 {
		t.Fatalf("%d segments: the test needs many", segs)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 5)
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range n {
				i := (k*7919 + r*1009) % n
				v, err := db.Get("t", fmt.Appendf(nil, "k%05d", i))
				if err != nil || !bytes.Equal(v, val(i)) {
					errc <- fmt.Errorf("Get k%05d: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := n; i < n+300; i++ {
			if err := db.Put("t", fmt.Appendf(nil, "k%05d", i), val(i)); err != nil {
				errc <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if rep, err := db.Check(); err != nil || rep.JournalValues < n {
		t.Fatalf("Check: %+v %v", rep, err)
	}
	if st := db.Stats(); st.SegmentReopens == 0 {
		t.Fatal("no segment was reopened")
	}
	// 2 sealed, one per reader reopening and one not yet closed by
	// another's eviction, the last, one being created.
	if p := peak.Load(); p > 12 {
		t.Fatalf("%d segment descriptors open at once, want at most 12", p)
	}
}
