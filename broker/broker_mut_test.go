package broker

// Tests added by mutation testing of the broker's writes and Check: each
// guards a check that a deliberate breakage of the code removed without
// any other test failing.

import (
	"errors"
	"testing"

	"github.com/kdb-project/kdb"
)

// setDestRec overwrites a destination's record (a damaged store).
func setDestRec(t *testing.T, b *Broker, kind DestKind, name string, edit func(d *destRec)) {
	t.Helper()
	if err := b.ns.Update(func(tx *kdb.Txn) error {
		key := destKey(kind, name)
		v, err := tx.Get(destsTree, key)
		if err != nil {
			return err
		}
		var d destRec
		if err := d.decode(key, v); err != nil {
			return err
		}
		edit(&d)
		return tx.Put(destsTree, key, d.encode())
	}); err != nil {
		t.Fatal(err)
	}
}

// TestMut_AckOfADamagedCountIsCorrupt guards unrefIfThere's check of the
// destination's counts (broker.go, "counts below zero"): a destination
// record that says it holds no message, or fewer bytes than the message
// acked, is damage (kdb.ErrCorrupt), not a count wrapped around to 2^64-1
// that the store would then keep and report.
func TestMut_AckOfADamagedCountIsCorrupt(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 128 << 10})
	var seqs []uint64
	for _, id := range []string{"a", "b"} {
		seq, err := b.Send(Queue, "q", &Message{ID: id, Body: []byte("body")})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	setDestRec(t, b, Queue, "q", func(d *destRec) { d.count = 0 })
	if err := b.Ack(Queue, "q", seqs[0]); !errors.Is(err, kdb.ErrCorrupt) {
		t.Fatalf("Ack with the count at 0: %v, want kdb.ErrCorrupt", err)
	}
	setDestRec(t, b, Queue, "q", func(d *destRec) { d.count, d.nbytes = 2, 1 })
	if err := b.Ack(Queue, "q", seqs[1]); !errors.Is(err, kdb.ErrCorrupt) {
		t.Fatalf("Ack with 1 byte recorded: %v, want kdb.ErrCorrupt", err)
	}
	if d, err := b.Destination(Queue, "q"); err != nil || d.Count != 2 || d.Bytes != 1 {
		t.Fatalf("after the refused Acks: %+v, %v; want the record left as it was", d, err)
	}
}

// TestMut_NamesOfTheLargestSize guards checkName's bound (broker.go,
// "len(s) > MaxNameSize"): names of exactly MaxNameSize bytes
// (destination, subscription, message and transaction IDs) are valid.
func TestMut_NamesOfTheLargestSize(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 128 << 10})
	long := func(c byte) string {
		s := make([]byte, MaxNameSize)
		for i := range s {
			s[i] = c
		}
		return string(s)
	}
	q, tp, sub, id, xid := long('q'), long('t'), long('s'), long('m'), long('x')
	if _, err := b.Send(Queue, q, &Message{ID: id, ProducerID: long('p'), ProducerSeq: 1, Body: []byte("x")}); err != nil {
		t.Fatalf("Send with names of %d bytes: %v", MaxNameSize, err)
	}
	if m, err := b.GetMessage(Queue, q, id); err != nil || m.ID != id {
		t.Fatalf("GetMessage of an ID of %d bytes: %v, %v", MaxNameSize, m, err)
	}
	if err := b.Subscribe(tp, sub); err != nil {
		t.Fatalf("Subscribe with names of %d bytes: %v", MaxNameSize, err)
	}
	tx := b.BeginTx()
	if err := tx.Send(Topic, tp, &Message{ID: id, Body: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Prepare(xid); err != nil {
		t.Fatalf("Prepare with an ID of %d bytes: %v", MaxNameSize, err)
	}
	if err := b.CommitPrepared(xid); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Pending(tp, sub); err != nil || n != 1 {
		t.Fatalf("Pending: %d, %v; want 1", n, err)
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestMut_GetMessageOfADamagedIDIndex guards GetMessage's checks of the
// ID index's value (read.go): a value of other than 8 bytes ("len(v) !=
// 8"; 9 bytes were read as their first 8) and a sequence number of no
// message (the index dangling: not kdb.ErrNotFound, which says the ID was
// never sent) are damage, kdb.ErrCorrupt, not a panic in a decode of 8
// bytes from it nor a message returned.
func TestMut_GetMessageOfADamagedIDIndex(t *testing.T) {
	for _, c := range []struct {
		name string
		v    func(seq uint64) []byte
	}{
		{"3 bytes", func(uint64) []byte { return []byte{1, 2, 3} }},
		{"7 bytes", func(seq uint64) []byte { return u64(seq)[:7] }},
		{"9 bytes", func(seq uint64) []byte { return append(u64(seq), 0) }},
		{"16 bytes", func(seq uint64) []byte { return append(u64(seq), u64(seq)...) }},
		{"a seq of no message", func(seq uint64) []byte { return u64(seq + 1) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := openTestBroker(t, &kdb.Options{SegmentSize: 128 << 10})
			seq, err := b.Send(Queue, "q", &Message{ID: "m", Body: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			var id uint64
			if err := b.view(func(s snap) error {
				d, err := s.destRec(Queue, "q")
				if err == nil {
					id = d.id
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if err := b.ns.Update(func(tx *kdb.Txn) error {
				return tx.Put(idTree(idPrefix, id), []byte("m"), c.v(seq))
			}); err != nil {
				t.Fatal(err)
			}
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("GetMessage of an ID indexed to %s panicked: %v", c.name, r)
					}
				}()
				if m, err := b.GetMessage(Queue, "q", "m"); !errors.Is(err, kdb.ErrCorrupt) {
					t.Fatalf("GetMessage of an ID indexed to %s: %+v, %v; want kdb.ErrCorrupt", c.name, m, err)
				}
			}()
			if err := b.Check(); !errors.Is(err, kdb.ErrCorrupt) {
				t.Fatalf("Check of an ID indexed to %s: %v, want kdb.ErrCorrupt", c.name, err)
			}
		})
	}
}

// TestMut_DeleteDestinationRemovesItsSubscriptions guards
// DeleteDestination's removal of a topic's subscription records
// (broker.go, w.del(subsTree, ...)): none is left under the deleted
// topic's id. Broker.Check does not see such a leftover (it lists the
// subscriptions of the destinations there are), so the test reads the
// tree.
func TestMut_DeleteDestinationRemovesItsSubscriptions(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 128 << 10})
	for _, s := range []string{"s1", "s2"} {
		if err := b.Subscribe("t", s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Send(Topic, "t", &Message{ID: "m", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteDestination(Topic, "t"); err != nil {
		t.Fatal(err)
	}
	var left []string
	if err := b.view(func(s snap) error {
		it := s.s.Iter(subsTree)
		for ok := it.First(); ok; ok = it.Next() {
			left = append(left, string(it.Key()))
		}
		return it.Err()
	}); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("subscription records left after the topic was deleted: %q", left)
	}
	if err := b.Subscribe("t", "s1"); err != nil {
		t.Fatal(err)
	}
	if subs, err := b.Subscriptions("t"); err != nil || len(subs) != 1 || subs[0].Pending != 0 {
		t.Fatalf("subscriptions of the topic made again: %+v, %v; want s1 alone, nothing pending", subs, err)
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestMut_ReadSubFrom guards ReadSub's start (read.go, Seek(from)): it
// returns the pending messages from sequence number from on, not from the
// subscription's first.
func TestMut_ReadSubFrom(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 128 << 10})
	if err := b.Subscribe("t", "s"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		if _, err := b.Send(Topic, "t", &Message{ID: id, Body: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := b.ReadSub("t", "s", 3, 10)
	if err != nil || len(ms) != 2 || ms[0].Seq != 3 || ms[0].ID != "c" || ms[1].ID != "d" {
		t.Fatalf("ReadSub from 3: %+v, %v; want c (3) and d (4)", ms, err)
	}
}

// TestMut_RecordsOfAWrongSize guards the decoders' length checks of the
// broker's fixed-size records and keys: a destination record of 32 bytes
// exactly ("len(v) != destRecSize": 33 were read as their first 32), a
// destination key of a kind and a name of one byte at least ("len(k) <
// 2"), a message header holding an ID ("len(v) < 9": one of 8 bytes, no
// ID, made an Ack fail as a bad argument, deleting an ID index key of 0
// bytes). Each is kdb.ErrCorrupt from the call that reads it, and from
// Check.
func TestMut_RecordsOfAWrongSize(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(tx *kdb.Txn, d *destRec, seq uint64) error
		read   func(b *Broker, seq uint64) error
	}{
		{"destination record of 33 bytes", func(tx *kdb.Txn, d *destRec, _ uint64) error {
			return tx.Put(destsTree, d.key, append(d.encode(), 0))
		}, func(b *Broker, _ uint64) error {
			_, err := b.Destination(Queue, "q")
			return err
		}},
		{"destination record of 31 bytes", func(tx *kdb.Txn, d *destRec, _ uint64) error {
			return tx.Put(destsTree, d.key, d.encode()[:31])
		}, func(b *Broker, _ uint64) error {
			_, err := b.Destination(Queue, "q")
			return err
		}},
		{"destination key of a kind and no name", func(tx *kdb.Txn, d *destRec, _ uint64) error {
			return tx.Put(destsTree, d.key[:1], d.encode())
		}, func(b *Broker, _ uint64) error {
			_, err := b.Destinations()
			return err
		}},
		{"message header of 8 bytes", func(tx *kdb.Txn, d *destRec, seq uint64) error {
			v, err := tx.Get(idTree(hdrPrefix, d.id), seqKey(seq))
			if err != nil {
				return err
			}
			return tx.Put(idTree(hdrPrefix, d.id), seqKey(seq), v[:8])
		}, func(b *Broker, seq uint64) error { return b.Ack(Queue, "q", seq) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := openTestBroker(t, &kdb.Options{SegmentSize: 128 << 10})
			seq, err := b.Send(Queue, "q", &Message{ID: "m", Body: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.ns.Update(func(tx *kdb.Txn) error {
				v, err := tx.Get(destsTree, destKey(Queue, "q"))
				if err != nil {
					return err
				}
				d, err := decodeDestRec(destKey(Queue, "q"), v)
				if err != nil {
					return err
				}
				return c.damage(tx, d, seq)
			}); err != nil {
				t.Fatal(err)
			}
			if err := c.read(b, seq); !errors.Is(err, kdb.ErrCorrupt) {
				t.Fatalf("read of a %s: %v, want kdb.ErrCorrupt", c.name, err)
			}
			if err := b.Check(); !errors.Is(err, kdb.ErrCorrupt) {
				t.Fatalf("Check of a %s: %v, want kdb.ErrCorrupt", c.name, err)
			}
		})
	}
}
