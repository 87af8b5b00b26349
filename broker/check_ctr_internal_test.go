package broker

import (
	"errors"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
)

// TestCheck_IDCounterOfTheWrongLength: the id counter (tree "ctr", key
// "ids": the next destination or subscription id, 8 bytes) of another
// length is damage that Check must report as such. It was read only when
// 8 bytes long: otherwise Check took the next id for 0, which it reported
// as a bad id of the first destination, if any, and passed a store of
// none (whose next CreateDestination then failed on it).
func TestCheck_IDCounterOfTheWrongLength(t *testing.T) {
	for _, withDest := range []bool{false, true} {
		for _, n := range []int{0, 7, 9, 16} {
			b := openTestBroker(t, nil)
			if err := b.CreateDestination(Queue, "gone"); err != nil {
				t.Fatal(err)
			}
			if err := b.DeleteDestination(Queue, "gone"); err != nil {
				t.Fatal(err)
			}
			if withDest {
				if _, err := b.Send(Queue, "q", &Message{ID: "m", Body: []byte("x")}); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Check(); err != nil {
				t.Fatalf("Check before the damage: %v", err)
			}
			if err := b.ns.Update(func(tx *kdb.Txn) error { return tx.Put(ctrTree, []byte("ids"), make([]byte, n)) }); err != nil {
				t.Fatal(err)
			}
			err := b.Check()
			if !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), "id counter") {
				t.Errorf("Check of an id counter of %d bytes (a destination: %v): %v, want kdb.ErrCorrupt naming the id counter", n, withDest, err)
			}
		}
	}
}
