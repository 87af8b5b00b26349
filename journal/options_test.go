package journal

import (
	"errors"
	"testing"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

func TestOptions_Validate(t *testing.T) {
	cases := []struct {
		name string
		o    Options
		ok   bool
	}{
		{"zero value", Options{}, true},
		{"small segments", Options{SegmentSize: 4096}, true},
		{"segment too small", Options{SegmentSize: 1000}, false},
		{"segment too large", Options{SegmentSize: 3 << 30}, false},
		{"record larger than a segment", Options{SegmentSize: 8192, MaxRecordSize: 8192}, false},
		{"largest record", Options{SegmentSize: 8192, MaxRecordSize: int(maxPayloadFor(8192))}, true},
		{"unknown policy", Options{Sync: 7}, false},
		{"negative interval", Options{Sync: SyncInterval, SyncInterval: -time.Second}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.withDefaults().validate()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrBadOptions)) {
				t.Fatalf("validate: %v", err)
			}
		})
	}
	if o := (Options{}).withDefaults(); o.SegmentSize != 32<<20 || o.MaxRecordSize != 16<<20 || o.FS == nil || o.Sync != SyncAlways {
		t.Fatalf("defaults: %+v", o)
	}
}

func TestJournal_AppendRefusals(t *testing.T) {
	j, _ := openMem(t, vfs.NewMem(), Options{SegmentSize: 8192})
	defer mustClose(t, j)
	if _, err := j.Append(Record{Type: MinReservedType}); !errors.Is(err, ErrReservedType) {
		t.Fatalf("reserved type: %v", err)
	}
	if _, err := j.Append(Record{Payload: make([]byte, j.opts.MaxRecordSize+1)}); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	big := Record{Payload: make([]byte, 3000)}
	if _, err := j.Append(big, big, big); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("batch too large: %v", err)
	}
	// None of these fails the journal; the largest record fits.
	if _, err := j.Append(Record{Payload: make([]byte, j.opts.MaxRecordSize)}); err != nil || j.Err() != nil {
		t.Fatalf("largest record: %v %v", err, j.Err())
	}
	if locs, err := j.Append(); locs != nil || err != nil {
		t.Fatalf("empty append: %v %v", locs, err)
	}
}

func TestJournal_ReadNotFound(t *testing.T) {
	j, _ := openMem(t, vfs.NewMem(), Options{})
	locs, err := j.Append(Record{Type: 1, Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	for _, loc := range []Location{{}, {2, segHeaderSize}, {1, 0}, j.Tail(), {1, locs[0].Offset + 4}} {
		if _, err := j.Read(loc); !errors.Is(err, ErrNotFound) {
			t.Errorf("Read(%v): %v", loc, err)
		}
	}
	mustClose(t, j)
	if _, err := j.Read(locs[0]); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if err := j.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

func TestJournal_SyncPolicies(t *testing.T) {
	t.Run("always", func(t *testing.T) {
		j, _ := openMem(t, vfs.NewMem(), Options{})
		defer mustClose(t, j)
		before := j.Stats().Fsyncs
		for i := 0; i < 10; i++ {
			if _, err := j.Append(Record{Type: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if got := j.Stats().Fsyncs - before; got != 10 {
			t.Fatalf("%d fsyncs for 10 sequential appends", got)
		}
	})
	t.Run("never syncs only on demand", func(t *testing.T) {
		fs := vfs.NewMem()
		j, _ := openMem(t, fs, Options{Sync: UnsafeSyncNever})
		defer mustClose(t, j)
		before := j.Stats().Fsyncs
		for i := 0; i < 10; i++ {
			if _, err := j.Append(Record{Type: 1, Payload: []byte{byte(i)}}); err != nil {
				t.Fatal(err)
			}
		}
		if got := j.Stats().Fsyncs - before; got != 0 {
			t.Fatalf("%d fsyncs", got)
		}
		img := fs.CrashClone(vfs.CrashOptions{})
		j2, _ := openMem(t, img, Options{})
		if n := len(collect(t, j2)); n != 0 {
			t.Fatalf("%d unsynced records survived a drop-all crash", n)
		}
		mustClose(t, j2)
		if err := j.Sync(); err != nil {
			t.Fatal(err)
		}
		if got := j.Stats().Fsyncs - before; got != 1 {
			t.Fatalf("Sync: %d fsyncs", got)
		}
		img = fs.CrashClone(vfs.CrashOptions{})
		j3, _ := openMem(t, img, Options{})
		defer mustClose(t, j3)
		if n := len(collect(t, j3)); n != 10 {
			t.Fatalf("%d records after Sync and a crash, want 10", n)
		}
	})
	t.Run("interval syncs in the background", func(t *testing.T) {
		fs := vfs.NewMem()
		j, _ := openMem(t, fs, Options{Sync: SyncInterval, SyncInterval: time.Millisecond})
		defer mustClose(t, j)
		before := j.Stats().Fsyncs
		if _, err := j.Append(Record{Type: 1}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for j.Stats().Fsyncs == before {
			if time.Now().After(deadline) {
				t.Fatal("no background sync within 5s")
			}
			time.Sleep(time.Millisecond)
		}
		img := fs.CrashClone(vfs.CrashOptions{})
		j2, _ := openMem(t, img, Options{})
		defer mustClose(t, j2)
		if n := len(collect(t, j2)); n != 1 {
			t.Fatalf("%d records after the background sync and a crash", n)
		}
		// The syncer sleeps while nothing is written; a batch written
		// after an idle spell wakes it again.
		time.Sleep(20 * time.Millisecond)
		before = j.Stats().Fsyncs
		if _, err := j.Append(Record{Type: 2}); err != nil {
			t.Fatal(err)
		}
		deadline = time.Now().Add(5 * time.Second)
		for j.Stats().Fsyncs == before {
			if time.Now().After(deadline) {
				t.Fatal("no background sync within 5s of a write after an idle spell")
			}
			time.Sleep(time.Millisecond)
		}
		img = fs.CrashClone(vfs.CrashOptions{})
		j3, _ := openMem(t, img, Options{})
		defer mustClose(t, j3)
		if n := len(collect(t, j3)); n != 2 {
			t.Fatalf("%d records after the second background sync and a crash, want 2", n)
		}
	})
}
