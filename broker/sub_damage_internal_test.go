package broker

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/kdb-project/kdb"
)

// TestSubscription_DamagedRecordIsCorrupt: a durable subscription's record
// (tree "subs" of namespace "b": the topic's id, u64 big-endian, and the
// subscription's name, to its id and start seq, 16 bytes) of another
// length is damage. Pending and ReadSub took it for a subscription that
// does not exist (kdb.ErrNotFound), hiding the damage; every reader of it
// now says kdb.ErrCorrupt, naming the subscription and the length.
func TestSubscription_DamagedRecordIsCorrupt(t *testing.T) {
	for _, n := range []int{0, 8, 15, 17, 24} {
		b := openTestBroker(t, nil)
		if err := b.Subscribe("t", "s"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Send(Topic, "t", &Message{ID: "m", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		// Damage the record through the engine's API, under the
		// broker's key layout (docs/FORMAT.md, broker trees).
		ns, err := b.DB().Namespace(Namespace)
		if err != nil {
			t.Fatal(err)
		}
		dv, err := ns.Get("dests", append([]byte{byte(Topic)}, "t"...))
		if err != nil || len(dv) != 32 {
			t.Fatalf("topic record: %x, %v", dv, err)
		}
		key := append(binary.BigEndian.AppendUint64(nil, binary.LittleEndian.Uint64(dv)), "s"...)
		old, err := ns.Get("subs", key)
		if err != nil || len(old) != 16 {
			t.Fatalf("subscription record: %x, %v", old, err)
		}
		bad := append(old[:min(n, 16):min(n, 16)], make([]byte, max(0, n-16))...)
		if err := ns.Update(func(tx *kdb.Txn) error { return tx.Put("subs", key, bad) }); err != nil {
			t.Fatal(err)
		}
		_, err = b.Pending("t", "s")
		if !errors.Is(err, kdb.ErrCorrupt) {
			t.Errorf("Pending of a subscription record of %d bytes: %v, want kdb.ErrCorrupt", n, err)
		}
		_, err = b.ReadSub("t", "s", 0, 10)
		if !errors.Is(err, kdb.ErrCorrupt) {
			t.Errorf("ReadSub of a subscription record of %d bytes: %v, want kdb.ErrCorrupt", n, err)
		}
		if err := b.AckSub("t", "s", 1); !errors.Is(err, kdb.ErrCorrupt) {
			t.Errorf("AckSub of a subscription record of %d bytes: %v, want kdb.ErrCorrupt", n, err)
		}
		if _, err := b.Subscriptions("t"); !errors.Is(err, kdb.ErrCorrupt) {
			t.Errorf("Subscriptions of a topic with a subscription record of %d bytes: %v, want kdb.ErrCorrupt", n, err)
		}
		if err := b.Check(); !errors.Is(err, kdb.ErrCorrupt) {
			t.Errorf("Check of a subscription record of %d bytes: %v, want kdb.ErrCorrupt", n, err)
		}
	}
}

// TestSubscription_PendingMessageMissingIsCorrupt: a subscription's pending
// entry whose message is not there (a damaged store) is kdb.ErrCorrupt
// from ReadSub, naming the entry, not a message skipped: a reader that
// skipped it would ack past a message it never got.
func TestSubscription_PendingMessageMissingIsCorrupt(t *testing.T) {
	b := openTestBroker(t, nil)
	if err := b.Subscribe("t", "s"); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, id := range []string{"a", "b"} {
		seq, err := b.Send(Topic, "t", &Message{ID: id, Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	var topic uint64
	if err := b.view(func(s snap) error {
		d, err := s.destRec(Topic, "t")
		if err == nil {
			topic = d.id
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.ns.Update(func(tx *kdb.Txn) error { return tx.Delete(idTree(msgPrefix, topic), seqKey(seqs[0])) }); err != nil {
		t.Fatal(err)
	}
	if ms, err := b.ReadSub("t", "s", 0, 10); !errors.Is(err, kdb.ErrCorrupt) {
		t.Fatalf("ReadSub with pending message %d missing: %d messages, %v; want kdb.ErrCorrupt", seqs[0], len(ms), err)
	}
	if ms, err := b.ReadSub("t", "s", seqs[1], 10); err != nil || len(ms) != 1 || ms[0].ID != "b" {
		t.Fatalf("ReadSub from the message after the missing one: %+v, %v; want message b", ms, err)
	}
}
