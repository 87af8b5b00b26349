package broker

// TestMut_CheckFindsEachDamage was added by mutation testing of
// Broker.Check (check.go): no test damaged the broker's trees and asked
// Check about them, so removing or relaxing any of its rules failed no
// test. Each case below makes one kind of damage that exactly one rule
// finds (the others still hold), and the rule it guards is named.

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
)

func TestMut_CheckFindsEachDamage(t *testing.T) {
	// Helpers reading and writing the trees of a broker directly.
	put := func(t *testing.T, b *Broker, tree string, key, val []byte) {
		t.Helper()
		if err := b.ns.Update(func(tx *kdb.Txn) error { return tx.Put(tree, key, val) }); err != nil {
			t.Fatal(err)
		}
	}
	del := func(t *testing.T, b *Broker, tree string, key []byte) {
		t.Helper()
		if err := b.ns.Update(func(tx *kdb.Txn) error { return tx.Delete(tree, key) }); err != nil {
			t.Fatal(err)
		}
	}
	get := func(t *testing.T, b *Broker, tree string, key []byte) []byte {
		t.Helper()
		v, err := b.ns.Get(tree, key)
		if err != nil {
			t.Fatalf("%s %q: %v", tree, key, err)
		}
		return v
	}
	dest := func(t *testing.T, b *Broker, kind DestKind, name string) *destRec {
		t.Helper()
		d, err := decodeDestRec(destKey(kind, name), get(t, b, destsTree, destKey(kind, name)))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	nextID := func(t *testing.T, b *Broker) uint64 {
		t.Helper()
		return binary.LittleEndian.Uint64(get(t, b, ctrTree, []byte("ids")))
	}
	subKey := func(destID uint64, name string) []byte {
		return append(binary.BigEndian.AppendUint64(nil, destID), name...)
	}
	subID := func(t *testing.T, b *Broker, topic, sub string) uint64 {
		t.Helper()
		return binary.LittleEndian.Uint64(get(t, b, subsTree, subKey(dest(t, b, Topic, topic).id, sub)))
	}
	send := func(t *testing.T, b *Broker, kind DestKind, name, id string) uint64 {
		t.Helper()
		seq, err := b.Send(kind, name, &Message{ID: id, Body: []byte("body of " + id)})
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	editHdr := func(t *testing.T, b *Broker, d *destRec, seq uint64, edit func(refs, size uint32) (uint32, uint32)) {
		t.Helper()
		refs, size, id, err := decodeHdr(get(t, b, idTree(hdrPrefix, d.id), seqKey(seq)))
		if err != nil {
			t.Fatal(err)
		}
		refs, size = edit(refs, size)
		put(t, b, idTree(hdrPrefix, d.id), seqKey(seq), encodeHdr(refs, size, string(id)))
	}

	for _, c := range []struct {
		name   string
		damage func(t *testing.T, b *Broker)
	}{
		{"destination id not below the id counter (d.id >= maxID)", func(t *testing.T, b *Broker) {
			if err := b.CreateDestination(Queue, "q"); err != nil {
				t.Fatal(err)
			}
			d := dest(t, b, Queue, "q")
			d.id = nextID(t, b)
			put(t, b, destsTree, d.key, d.encode())
		}},
		{"destination next seq 0 (d.nextSeq == 0)", func(t *testing.T, b *Broker) {
			if err := b.CreateDestination(Queue, "q"); err != nil {
				t.Fatal(err)
			}
			d := dest(t, b, Queue, "q")
			d.nextSeq = 0
			put(t, b, destsTree, d.key, d.encode())
		}},
		{"message seq not below next seq (m.Seq >= d.nextSeq)", func(t *testing.T, b *Broker) {
			seq := send(t, b, Queue, "q", "m")
			d := dest(t, b, Queue, "q")
			d.nextSeq = seq
			put(t, b, destsTree, d.key, d.encode())
		}},
		{"header with no reference, pending for nobody (r == 0)", func(t *testing.T, b *Broker) {
			if err := b.Subscribe("t", "s"); err != nil {
				t.Fatal(err)
			}
			seq := send(t, b, Topic, "t", "m")
			editHdr(t, b, dest(t, b, Topic, "t"), seq, func(_, size uint32) (uint32, uint32) { return 0, size })
			del(t, b, idTree(pendPrefix, subID(t, b, "t", "s")), seqKey(seq))
		}},
		{"header size not the message's, counts agreeing (size != len(encoding))", func(t *testing.T, b *Broker) {
			seq := send(t, b, Queue, "q", "m")
			d := dest(t, b, Queue, "q")
			editHdr(t, b, d, seq, func(refs, size uint32) (uint32, uint32) { return refs, size + 1 })
			d.nbytes++
			put(t, b, destsTree, d.key, d.encode())
		}},
		{"ID indexed to another message (ID -> seq)", func(t *testing.T, b *Broker) {
			send(t, b, Queue, "q", "a")
			other := send(t, b, Queue, "q", "b")
			put(t, b, idTree(idPrefix, dest(t, b, Queue, "q").id), []byte("a"), u64(other))
		}},
		{"an ID index entry of no message (lenOf(xt) != count)", func(t *testing.T, b *Broker) {
			send(t, b, Queue, "q", "a")
			put(t, b, idTree(idPrefix, dest(t, b, Queue, "q").id), []byte("ghost"), u64(99))
		}},
		{"recorded count above the messages (count != d.count)", func(t *testing.T, b *Broker) {
			send(t, b, Queue, "q", "a")
			d := dest(t, b, Queue, "q")
			d.count++
			put(t, b, destsTree, d.key, d.encode())
		}},
		{"a gone subscription record naming another topic", func(t *testing.T, b *Broker) {
			if err := b.Subscribe("t", "s"); err != nil {
				t.Fatal(err)
			}
			k := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, dest(t, b, Topic, "t").id), subID(t, b, "t", "s"))
			put(t, b, goneTree, k, []byte("other"))
		}},
		{"a queue with a subscription", func(t *testing.T, b *Broker) {
			send(t, b, Queue, "q", "a")
			v := binary.LittleEndian.AppendUint64(u64(1), 1)
			put(t, b, subsTree, subKey(dest(t, b, Queue, "q").id, "s"), v)
		}},
		{"subscription id not below the id counter (id >= maxID)", func(t *testing.T, b *Broker) {
			if err := b.Subscribe("t", "s"); err != nil {
				t.Fatal(err)
			}
			d := dest(t, b, Topic, "t")
			v := binary.LittleEndian.AppendUint64(u64(nextID(t, b)), d.nextSeq)
			put(t, b, subsTree, subKey(d.id, "s"), v)
		}},
		{"pending message that is not there", func(t *testing.T, b *Broker) {
			if err := b.Subscribe("t", "s"); err != nil {
				t.Fatal(err)
			}
			send(t, b, Topic, "t", "m")
			put(t, b, idTree(pendPrefix, subID(t, b, "t", "s")), seqKey(99), []byte{})
		}},
		{"queue message with two references (r != want)", func(t *testing.T, b *Broker) {
			seq := send(t, b, Queue, "q", "m")
			editHdr(t, b, dest(t, b, Queue, "q"), seq, func(_, size uint32) (uint32, uint32) { return 2, size })
		}},
		{"a tree of no destination or subscription", func(t *testing.T, b *Broker) {
			send(t, b, Queue, "q", "m")
			put(t, b, idTree(msgPrefix, 1000), seqKey(1), encodeMessage(&Message{ID: "orphan"}))
		}},
		{"a prepared transaction that does not decode", func(t *testing.T, b *Broker) {
			send(t, b, Queue, "q", "m")
			put(t, b, txTree, []byte("x"), []byte{txVersion, 1, 99})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := openTestBroker(t, &kdb.Options{SegmentSize: 128 << 10})
			c.damage(t, b)
			// Where a later check could find the same damage, the error
			// must be this one's.
			want := map[string]string{
				"a queue with a subscription":                     "a queue with subscriptions",
				"a gone subscription record naming another topic": "names no topic",
			}[c.name]
			if err := b.Check(); !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), want) {
				t.Fatalf("Check: %v, want kdb.ErrCorrupt saying %q", err, want)
			}
		})
	}
}

// TestMut_CheckOfTheUndamagedCases runs the setups of
// TestMut_CheckFindsEachDamage without the damage: Check passes, so each
// case's failure there is the damage's.
func TestMut_CheckOfTheUndamagedCases(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 128 << 10})
	if err := b.CreateDestination(Queue, "empty"); err != nil {
		t.Fatal(err)
	}
	if err := b.Subscribe("t", "s"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if _, err := b.Send(Queue, "q", &Message{ID: id, Body: []byte("body of " + id)}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Send(Topic, "t", &Message{ID: id, Body: []byte("body of " + id)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
}
