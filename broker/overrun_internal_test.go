package broker

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// A store whose broker records disagree (a destination's next sequence
// number at or below a message it holds: an export edited and its
// checksums made again imports cleanly) let the next Send take that
// number and replace the message, silently. Open now finds such a
// destination and its sends are ErrCorrupt; reads and the other
// destinations go on.
func TestOpen_SendsRefusedWhereAMessageHoldsTheNextNumber(t *testing.T) {
	fs := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"q1", "q2", "q3"} {
		if _, err := b.Send(Queue, "q", &Message{ID: id, Body: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Send(Queue, "other", &Message{ID: "o1"}); err != nil {
		t.Fatal(err)
	}
	// The edit: q's next sequence number set back to 2.
	key := append([]byte{byte(Queue)}, "q"...)
	err = b.ns.Update(func(tx *kdb.Txn) error {
		v, err := tx.Get(destsTree, key)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(v[8:], 2)
		return tx.Put(destsTree, key, v)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = kdb.Open("/db", &kdb.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, err = Open(db)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Send(Queue, "q", &Message{ID: "new", Body: []byte("new")})
	if !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), "holds message 3") {
		t.Errorf("Send to the damaged queue: %v, want ErrCorrupt naming message 3", err)
	}
	tx := b.BeginTx()
	tx.Send(Queue, "q", &Message{ID: "new2"})
	if err := tx.Commit(); !errors.Is(err, kdb.ErrCorrupt) {
		t.Errorf("Tx.Commit sending to the damaged queue: %v, want ErrCorrupt", err)
	}
	ms, err := b.Read(Queue, "q", 0, 10)
	if err != nil || len(ms) != 3 || ms[1].ID != "q2" {
		t.Errorf("Read of the damaged queue: %d messages (%v), want q1..q3 intact", len(ms), err)
	}
	if _, err := b.Send(Queue, "other", &Message{ID: "o2"}); err != nil {
		t.Errorf("Send to another queue: %v", err)
	}
	if err := b.Check(); !errors.Is(err, kdb.ErrCorrupt) {
		t.Errorf("Check: %v, want ErrCorrupt", err)
	}
}

// Check read every broker record but the producers' last sequence numbers:
// a 3-byte one passed, and the producer's next Send failed on it.
func TestCheck_ProducerRecordsChecked(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, err := Open(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Send(Queue, "q", &Message{ID: "m1", ProducerID: "p", ProducerSeq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := b.Check(); err != nil {
		t.Fatalf("Check of the intact store: %v", err)
	}
	err = b.ns.Update(func(tx *kdb.Txn) error {
		v, err := tx.Get(destsTree, append([]byte{byte(Queue)}, "q"...))
		if err != nil {
			return err
		}
		return tx.Put(idTree(prodPrefix, binary.LittleEndian.Uint64(v)), []byte("p"), []byte{1, 2, 3})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Check(); !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), `producer "p"`) {
		t.Errorf("Check with a 3-byte producer record: %v, want ErrCorrupt naming it", err)
	}
}
