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
