package kdb_test

import (
	"errors"
	"testing"

	"github.com/kdb-project/kdb"
)

// TestReadOnly_EveryWriteRefused: on a read-only handle every call that
// writes is ErrReadOnly at once, and no function given to it runs. (Defer
// was checked by nothing: without its check it returned nil, queuing a
// transaction a read-only handle never commits.)
func TestReadOnly_EveryWriteRefused(t *testing.T) {
	dir := t.TempDir()
	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Put("t", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := kdb.Open(dir, &kdb.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	ran := false
	fn := func(tx *kdb.Txn) error { ran = true; return tx.Put("t", []byte("k2"), []byte("w")) }
	ns, err := ro.Namespace("app")
	if err != nil {
		t.Fatal(err)
	}
	b := kdb.NewBatch()
	b.Put("t", []byte("k3"), []byte("x"))
	calls := map[string]func() error{
		"Put":              func() error { return ro.Put("t", []byte("k"), []byte("w")) },
		"Delete":           func() error { return ro.Delete("t", []byte("k")) },
		"Write":            func() error { return ro.Write(b) },
		"Update":           func() error { return ro.Update(fn) },
		"Submit":           func() error { _, err := ro.Submit(fn); return err },
		"Defer":            func() error { return ro.Defer(fn, func(error) {}) },
		"Namespace.Update": func() error { return ns.Update(fn) },
		"Namespace.Submit": func() error { _, err := ns.Submit(fn); return err },
		"Namespace.Defer":  func() error { return ns.Defer(fn, func(error) {}) },
		"Compact":          func() error { _, err := ro.Compact(); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, kdb.ErrReadOnly) {
			t.Errorf("%s on a read-only handle: %v, want ErrReadOnly", name, err)
		}
	}
	if ran {
		t.Error("a transaction's function ran on a read-only handle")
	}
	if v, err := ro.Get("t", []byte("k")); err != nil || string(v) != "v" {
		t.Errorf("Get: %q, %v", v, err)
	}
}
