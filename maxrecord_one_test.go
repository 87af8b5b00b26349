package kdb

import (
	"errors"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// A single Put whose value is kept in the batch record (ValueThreshold
// above it) and does not fit used to be told "split the batch", which one
// operation cannot be (an outside tester, 2026-12-07): now the error names
// ValueThreshold, and a Put of that value with the default threshold
// works (it is kept apart, in a value record of its own).
func TestPut_OneOperationTooLargeSaysWhy(t *testing.T) {
	db, err := Open("/db", &Options{FS: vfs.NewMem(), ValueThreshold: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Put("t", []byte("k"), make([]byte, MaxValueSize))
	if !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "split") || !strings.Contains(err.Error(), "ValueThreshold") {
		t.Fatalf("one value of MaxValueSize kept in the batch record (8 MiB at most): %v, want ErrInvalid naming ValueThreshold", err)
	}
	db2, err := Open("/db2", &Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if err := db2.Put("t", []byte("k"), make([]byte, MaxValueSize)); err != nil {
		t.Fatalf("the same Put with the default ValueThreshold: %v", err)
	}
}
