package kdb_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestTxn_FitsAgreesWithCommit: for transactions on both sides of each of
// the bounds of one batch (the batch record, a value record, the batch
// with its value records), Txn.Fits says nil exactly when the commit
// succeeds, and otherwise the error the commit returns.
func TestTxn_FitsAgreesWithCommit(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	shapes := []struct {
		name  string
		write func(tx *kdb.Txn, i int) error
	}{
		{"inline values", func(tx *kdb.Txn, i int) error { return tx.Put("t", fmt.Appendf(nil, "k%06d", i), make([]byte, 100)) }},
		{"journal values", func(tx *kdb.Txn, i int) error { return tx.Put("t", fmt.Appendf(nil, "k%06d", i), make([]byte, 1000)) }},
		{"deletes", func(tx *kdb.Txn, i int) error { return tx.Delete("t", fmt.Appendf(nil, "some-longer-key-%06d", i)) }},
		{"one big value", func(tx *kdb.Txn, i int) error { return tx.Put("t", []byte("big"), make([]byte, 400*i)) }},
	}
	for _, sh := range shapes {
		fitted, failed := 0, 0
		for n := 1; n <= 2000 && failed < 3; n++ {
			var fits error
			err := db.Update(func(tx *kdb.Txn) error {
				for i := range n {
					if err := sh.write(tx, i); err != nil {
						return err
					}
				}
				fits = tx.Fits()
				return nil
			})
			switch {
			case err == nil && fits == nil:
				fitted++
			case err != nil && fits != nil && err.Error() == fits.Error() && errors.Is(fits, kdb.ErrInvalid):
				failed++
			default:
				t.Fatalf("%s, %d writes: Fits %v, commit %v", sh.name, n, fits, err)
			}
		}
		if fitted == 0 || failed == 0 {
			t.Errorf("%s: %d fitted, %d did not: the sweep missed the bound", sh.name, fitted, failed)
		}
	}
	if err := db.Err(); err != nil {
		t.Fatal(err)
	}
}
