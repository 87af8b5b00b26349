package kdb_test

import (
	"errors"
	"runtime"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestAPI_NilFunctionsAndBatches: Write(nil), View(nil), Update(nil),
// Submit(nil), Export(nil) and Import of a nil reader are ErrInvalid (they
// were nil-pointer panics), as Defer(nil) already was.
func TestAPI_NilFunctionsAndBatches(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ns, err := db.Namespace("nn")
	if err != nil {
		t.Fatal(err)
	}
	_, submitErr := db.Submit(nil)
	_, nsSubmitErr := ns.Submit(nil)
	_, exportErr := db.Export(nil)
	mem := vfs.NewMem()
	_, importErr := kdb.Import("/imp", nil, &kdb.Options{FS: mem})
	for name, err := range map[string]error{
		"Write": db.Write(nil), "View": db.View(nil), "Update": db.Update(nil), "Submit": submitErr,
		"Namespace.View": ns.View(nil), "Namespace.Update": ns.Update(nil), "Namespace.Submit": nsSubmitErr,
		"Export": exportErr, "Import": importErr,
	} {
		if !errors.Is(err, kdb.ErrInvalid) {
			t.Errorf("%s(nil): %v, want ErrInvalid", name, err)
		}
	}
	if err := db.Put("t", []byte("k"), []byte("v")); err != nil {
		t.Fatalf("Put after: %v", err)
	}
	// Import(nil) left nothing behind (it left a temporary directory and
	// a lock beside the one named).
	if names, err := mem.ReadDir("/"); err != nil || len(names) != 0 {
		t.Errorf("Import(nil) left %q (%v)", names, err)
	}
}

// TestAPI_OversizedValueNotCopied: a value over MaxValueSize is refused
// from its length, without the copy Put, a Batch and a Txn made of it first
// (512 MiB allocated for a 512 MiB value an outside tester passed).
func TestAPI_OversizedValueNotCopied(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	huge := make([]byte, 64<<20) // 8x MaxValueSize
	allocated := func(f func() error) uint64 {
		t.Helper()
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		if err := f(); !errors.Is(err, kdb.ErrInvalid) {
			t.Fatalf("oversized value: %v, want ErrInvalid", err)
		}
		runtime.ReadMemStats(&m1)
		return m1.TotalAlloc - m0.TotalAlloc
	}
	for name, f := range map[string]func() error{
		"Put": func() error { return db.Put("t", []byte("k"), huge) },
		"Batch": func() error {
			b := kdb.NewBatch()
			b.Put("t", []byte("k1"), huge)
			b.Put("t", []byte("k2"), huge)
			return db.Write(b)
		},
		"Txn.Put": func() error {
			return db.Update(func(tx *kdb.Txn) error { return tx.Put("t", []byte("k"), huge) })
		},
	} {
		if n := allocated(f); n > 8<<20 {
			t.Errorf("%s of a %d-byte value allocated %d bytes before refusing it", name, len(huge), n)
		}
	}
}

// TestAPI_AfterCloseEveryWriteSaysSo: an empty Write and a Compact with
// nothing to do returned nil on a closed handle; every other call there
// returns ErrClosed.
func TestAPI_AfterCloseEveryWriteSaysSo(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Write(kdb.NewBatch()); err != nil {
		t.Fatalf("empty Write on an open handle: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Write(kdb.NewBatch()); !errors.Is(err, kdb.ErrClosed) {
		t.Errorf("empty Write after Close: %v, want ErrClosed", err)
	}
	if _, err := db.Compact(); !errors.Is(err, kdb.ErrClosed) {
		t.Errorf("Compact after Close: %v, want ErrClosed", err)
	}
}
