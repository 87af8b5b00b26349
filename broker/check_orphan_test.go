package broker

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/kdb-project/kdb"
)

// A subscription record whose topic is gone (a bad tool, a bug in
// DeleteDestination) is damage Check reports, and an ID-index entry of the
// wrong length is damage GetMessage reports as such, not as a message
// that is not there.
func TestCheck_OrphanSubscriptionAndBadIDEntry(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 128 << 10})
	if err := b.Subscribe("t", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Send(Queue, "q", &Message{ID: "m", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := b.Check(); err != nil {
		t.Fatalf("Check of an intact broker: %v", err)
	}
	orphan := append(binary.BigEndian.AppendUint64(nil, 1<<40), "ghost"...)
	if err := b.ns.Update(func(tx *kdb.Txn) error {
		return tx.Put(subsTree, orphan, binary.LittleEndian.AppendUint64(nil, 7))
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Check(); !errors.Is(err, kdb.ErrCorrupt) {
		t.Fatalf("Check with a subscription of no topic: %v, want ErrCorrupt", err)
	}
	if err := b.ns.Update(func(tx *kdb.Txn) error { return tx.Delete(subsTree, orphan) }); err != nil {
		t.Fatal(err)
	}

	var qid uint64
	if err := b.view(func(s snap) error {
		d, err := s.destRec(Queue, "q")
		qid = d.id
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.ns.Update(func(tx *kdb.Txn) error {
		return tx.Put(idTree(idPrefix, qid), []byte("m"), []byte{1, 2, 3})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetMessage(Queue, "q", "m"); !errors.Is(err, kdb.ErrCorrupt) {
		t.Fatalf("GetMessage through a 3-byte ID entry: %v, want ErrCorrupt", err)
	}
	if _, err := b.GetMessage(Queue, "q", "other"); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("GetMessage of an ID never sent: %v, want ErrNotFound", err)
	}
}
