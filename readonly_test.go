package kdb_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/kdb-project/kdb"
)

// A ReadOnly handle whose store another handle rewrites and checkpoints
// under it either reads its own snapshot exactly or fails with ErrStale,
// never ErrCorrupt; a new ReadOnly open sees the new state.
func TestReadOnly_ViewAfterLiveCheckpointsIsStaleNotCorrupt(t *testing.T) {
	dir := t.TempDir()
	w, err := kdb.Open(dir, &kdb.Options{CheckpointInterval: -1, ValueThreshold: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	val := func(round, i int) []byte {
		v := []byte(fmt.Sprintf("r%d-v%05d-", round, i))
		if i%5 == 0 {
			v = bytes.Repeat(v, 20) // kept in the journal
		}
		return v
	}
	write := func(round int) {
		b := kdb.NewBatch()
		for i := 0; i < 2000; i++ {
			b.Put("ix", []byte(fmt.Sprintf("k%05d", i)), val(round, i))
			if b.Len() == 200 {
				if err := w.Write(b); err != nil {
					t.Fatal(err)
				}
				b.Reset()
			}
		}
		if err := w.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	write(0)
	ro, err := kdb.Open(dir, &kdb.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	for round := 1; round <= 6; round++ {
		write(round) // every page of the old tree is freed, reused, rewritten in place
	}
	stale := false
	err = ro.View(func(s *kdb.Snapshot) error {
		it := s.Iter("ix")
		i := 0
		for ok := it.Seek(nil); ok; ok = it.Next() {
			if v := it.Value(); v != nil && !bytes.Equal(v, val(0, i)) {
				return fmt.Errorf("key %q: %q, want the snapshot's %q", it.Key(), v, val(0, i))
			}
			i++
		}
		return it.Err()
	})
	switch {
	case errors.Is(err, kdb.ErrStale) && !errors.Is(err, kdb.ErrCorrupt):
		stale = true
	case err != nil:
		t.Fatalf("read-only View after live checkpoints: %v; want ErrStale or the old snapshot", err)
	}
	if !stale {
		// Six rounds rewrote every page of the snapshot's tree: its pages
		// were reused by the writer, so the read must have met them.
		t.Errorf("the read-only View read the whole snapshot although its pages were rewritten")
	}
	ro2, err := kdb.Open(dir, &kdb.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro2.Close()
	if v, err := ro2.Get("ix", []byte("k00005")); err != nil || !bytes.Equal(v, val(6, 5)) {
		t.Errorf("a new read-only open: %q, %v", v, err)
	}
	if _, err := ro2.Check(); err != nil {
		t.Errorf("Check of a fresh read-only open: %v", err)
	}
}
