package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

// TestDemo_RefusesALiveStore: demo deletes and rebuilds DIR and DIR-scan,
// so it first takes each one's store lock, as kdb.Open does: a store that
// a live process holds (here this test process; demo runs as a child, so
// the lock conflicts as another program's would) is refused with
// kdb.ErrLocked and exit 3, and its files are left as they were.
func TestDemo_RefusesALiveStore(t *testing.T) {
	t.Parallel()
	for _, side := range []string{"", "-scan"} {
		t.Run("DIR"+side, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			dir := filepath.Join(root, "demo")
			live := dir + side
			src := makeStore(t, 300)
			if err := copyDir(src, live); err != nil {
				t.Fatal(err)
			}
			// An earlier demo's store, as demo marks the ones it builds.
			if err := os.WriteFile(filepath.Join(live, demoMark), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			db, err := kdb.Open(live, &kdb.Options{SegmentSize: testSegmentSize, CheckpointInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := db.Close(); err != nil {
					t.Error(err)
				}
			}()
			before := fileStates(t, live)
			code, _, stderr := runChildTimeout(t, 2*time.Minute, "demo", "-size-mib", "1", dir)
			if code != exitIO || !strings.Contains(stderr, kdb.ErrLocked.Error()) || !strings.Contains(stderr, live) {
				t.Errorf("demo with %s open: exit %d, stderr %q; want exit %d and %q naming it", live, code, stderr, exitIO, kdb.ErrLocked)
			}
			requireUntouched(t, "demo", before, fileStates(t, live))
			if v, err := db.Get("users", []byte("user-00007")); err != nil || string(v) != "value-7" {
				t.Errorf("the live store after demo: %q, %v", v, err)
			}
		})
	}
}

// TestDemo_RefusesAStoreItDidNotBuild: demo deletes and rebuilds DIR, so a
// store it did not build (no KDBTOOL-DEMO file: an application's store,
// closed) is refused with exit 2 and left as it was, DIR or DIR-scan; a
// directory an earlier demo built is rebuilt.
func TestDemo_RefusesAStoreItDidNotBuild(t *testing.T) {
	t.Parallel()
	for _, side := range []string{"", "-scan"} {
		t.Run("DIR"+side, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "store")
			if err := copyDir(makeStore(t, 300), dir+side); err != nil {
				t.Fatal(err)
			}
			before := fileStates(t, dir+side)
			code, _, stderr := runChildTimeout(t, 2*time.Minute, "demo", "-size-mib", "1", dir)
			if code != exitUsage || !strings.Contains(stderr, "kdbtool demo did not build") || !strings.Contains(stderr, dir+side) {
				t.Errorf("demo over a store it did not build: exit %d, stderr %q; want exit %d naming %s", code, stderr, exitUsage, dir+side)
			}
			requireUntouched(t, "demo", before, fileStates(t, dir+side))
		})
	}
	t.Run("demo from before the mark", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "demo")
		db, err := kdb.Open(dir, &kdb.Options{SegmentSize: testSegmentSize})
		if err != nil {
			t.Fatal(err)
		}
		// Records of the demo's own form (an application's index named
		// "demo" is not the demo's: TestDemo_RefusesAnAppIndexNamedDemo).
		b := kdb.NewBatch()
		for k := range uint64(20) {
			val := make([]byte, demoValueSize)
			binary.LittleEndian.PutUint64(val, k^(k%demoWriters))
			b.Put("demo", demoKey(k), val)
		}
		if err := db.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runChildTimeout(t, 2*time.Minute, "demo", "-size-mib", "1", dir)
		if code != 0 || !strings.Contains(stdout, "missing: 0") {
			t.Fatalf("demo over an older demo's store (only the demo index, no mark): exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	})
	t.Run("earlier demo", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "demo")
		for i := range 2 {
			code, stdout, stderr := runChildTimeout(t, 2*time.Minute, "demo", "-size-mib", "1", dir)
			if code != 0 || !strings.Contains(stdout, "missing: 0") {
				t.Fatalf("demo run %d into %s: exit %d, stdout %q, stderr %q", i+1, dir, code, stdout, stderr)
			}
			for _, d := range []string{dir, dir + "-scan"} {
				if _, err := os.Stat(filepath.Join(d, demoMark)); err != nil {
					t.Fatalf("after demo run %d: %v", i+1, err)
				}
			}
		}
	})
}
