package kdb_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestRead_InvalidArgumentsAreErrInvalid: a read of a key or index name
// that no write can store (empty, or over its bound) is ErrInvalid, as
// the same argument to a write is: every Get path answered ErrNotFound,
// and Len and Exists no error at all, so a caller that built a key wrongly
// was told "not found" and never learned of its bug (an outside tester,
// 2026-12-07). Names and keys at their bounds are valid: ErrNotFound.
func TestRead_InvalidArgumentsAreErrInvalid(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ns, err := db.Namespace("ns")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Put("i", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	nsMax := kdb.MaxIndexNameSize - len("ns") + 1
	type arg struct {
		name, index string
		key         []byte
		want        error
		inNS        bool
	}
	args := []arg{
		{"empty index name", "", []byte("k"), kdb.ErrInvalid, false},
		{"index name over the bound", strings.Repeat("i", kdb.MaxIndexNameSize+1), []byte("k"), kdb.ErrInvalid, false},
		{"nil key", "i", nil, kdb.ErrInvalid, false},
		{"empty key", "i", []byte{}, kdb.ErrInvalid, false},
		{"key over the bound", "i", make([]byte, kdb.MaxKeySize+1), kdb.ErrInvalid, false},
		{"index name at the bound", strings.Repeat("i", kdb.MaxIndexNameSize), []byte("k"), kdb.ErrNotFound, false},
		{"key at the bound", "i", make([]byte, kdb.MaxKeySize), kdb.ErrNotFound, false},
		{"namespace: index name over its bound", strings.Repeat("i", nsMax+1), []byte("k"), kdb.ErrInvalid, true},
		{"namespace: index name at its bound", strings.Repeat("i", nsMax), []byte("k"), kdb.ErrNotFound, true},
	}
	for _, a := range args {
		t.Run(a.name, func(t *testing.T) {
			var errs []error
			if a.inNS {
				_, err := ns.Get(a.index, a.key)
				errs = append(errs, err)
			} else {
				_, err := db.Get(a.index, a.key)
				errs = append(errs, err)
				errs = append(errs, db.View(func(s *kdb.Snapshot) error {
					_, err := s.Get(a.index, a.key)
					return err
				}))
				errs = append(errs, db.Update(func(tx *kdb.Txn) error {
					_, err := tx.Get(a.index, a.key)
					return err
				}))
			}
			for i, err := range errs {
				if !errors.Is(err, a.want) {
					t.Errorf("Get path %d: %v, want %v", i, err, a.want)
				}
			}
			if !a.inNS && len(a.key) > 0 && len(a.key) <= kdb.MaxKeySize {
				// The index name alone: Len and Exists.
				wantName := a.want
				if wantName == kdb.ErrNotFound {
					wantName = nil
				}
				err := db.View(func(s *kdb.Snapshot) error {
					if _, err := s.Len(a.index); !errors.Is(err, wantName) {
						t.Errorf("Snapshot.Len: %v, want %v", err, wantName)
					}
					if _, err := s.Exists(a.index); !errors.Is(err, wantName) {
						t.Errorf("Snapshot.Exists: %v, want %v", err, wantName)
					}
					it := s.Iter(a.index)
					for ok := it.First(); ok; ok = it.Next() {
					}
					if err := it.Err(); !errors.Is(err, wantName) {
						t.Errorf("Snapshot.Iter: %v, want %v", err, wantName)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	// A valid read of what is there still works.
	if v, err := db.Get("i", []byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("Get: %q, %v", v, err)
	}
}
