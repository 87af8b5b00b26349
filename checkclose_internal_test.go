package kdb

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// TestCheck_DuringCloseNeverReadsUnmappedPages: Check's index phase reads
// page slices of db.data's mapping. It ran outside a registered View, so a
// Check that began while Close was under way read pages Close then
// unmapped (an outside tester's periodic Check during shutdown: SIGSEGV, a
// fatal error no program recovers from). Now it runs in a View: begun
// after Close, it returns ErrClosed and reads nothing.
func TestCheck_DuringCloseNeverReadsUnmappedPages(t *testing.T) {
	db, err := Open(t.TempDir(), &Options{ValueThreshold: -1})
	if err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 600)
	b := NewBatch()
	for i := 0; i < 12000; i++ {
		b.Put("t", binary.BigEndian.AppendUint64(nil, uint64(i)), val)
		if b.Len() == 500 {
			if err := db.Write(b); err != nil {
				t.Fatal(err)
			}
			b.Reset()
		}
	}
	atFiles, resume := make(chan struct{}), make(chan struct{})
	testHookCloseFiles = func() { close(atFiles); <-resume }
	defer func() { testHookCloseFiles = nil }()
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	<-atFiles // Close checkpointed and is about to close the files

	inWalk, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		first := true
		_, err := db.CheckProgress(func(phase string, n uint64) {
			if phase == "index pages" && first {
				first = false
				close(inWalk) // mid-walk, page slices of the mapping in use
				<-release
			}
		})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Check begun during Close: %v, want ErrClosed", err)
		}
		close(resume)
	case <-inWalk:
		close(resume) // Close unmaps db.data under the walk
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		close(release)
		err := <-done
		t.Fatalf("Check begun during Close walked the index (and survived the unmapping: %v); want ErrClosed before any page read", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Check neither returned nor walked")
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
}
