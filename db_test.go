package kdb_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

func TestDB_PutGetReopen(t *testing.T) {
	for _, fsName := range []string{"mem", "os"} {
		t.Run(fsName, func(t *testing.T) {
			var fs vfs.FS = vfs.NewMem()
			dir := "/store"
			if fsName == "os" {
				fs, dir = vfs.OS, t.TempDir()
			}
			opts := &kdb.Options{FS: fs, SegmentSize: 1 << 20}
			db, err := kdb.Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][]byte{}
			for i := 0; i < 500; i++ {
				k := fmt.Sprintf("key-%04d", i)
				v := bytes.Repeat([]byte{byte(i)}, i*7%2000)
				if err := db.Put("idx", []byte(k), v); err != nil {
					t.Fatal(err)
				}
				want[k] = v
			}
			for i := 0; i < 500; i += 3 {
				k := fmt.Sprintf("key-%04d", i)
				if err := db.Delete("idx", []byte(k)); err != nil {
					t.Fatal(err)
				}
				delete(want, k)
			}
			check := func(db *kdb.DB) {
				t.Helper()
				for i := 0; i < 500; i++ {
					k := fmt.Sprintf("key-%04d", i)
					got, err := db.Get("idx", []byte(k))
					w, ok := want[k]
					switch {
					case !ok && !errors.Is(err, kdb.ErrNotFound):
						t.Fatalf("%s: got %v, %v; want not found", k, len(got), err)
					case ok && (err != nil || !bytes.Equal(got, w)):
						t.Fatalf("%s: got %d bytes, %v; want %d bytes", k, len(got), err, len(w))
					}
				}
			}
			check(db)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db, err = kdb.Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			check(db)
			if r := db.Recovery(); r.FreeListPath != "trusted" || r.RecordsReplayed != 0 {
				t.Fatalf("clean reopen: %+v", r)
			}
			// Reopen without a final checkpoint: the journal is replayed.
			if err := db.Put("idx", []byte("late"), []byte("v")); err != nil {
				t.Fatal(err)
			}
			want["late"] = []byte("v")
			noCk := *opts
			noCk.NoCheckpointOnClose = true
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db, err = kdb.Open(dir, &noCk)
			if err != nil {
				t.Fatal(err)
			}
			check(db)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDB_Locked(t *testing.T) {
	dir := t.TempDir()
	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := kdb.Open(dir, nil); !errors.Is(err, kdb.ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
}
