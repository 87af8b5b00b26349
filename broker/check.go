package broker

import (
	"encoding/binary"
	"fmt"

	"github.com/kdb-project/kdb"
)

// Check verifies the broker's trees against a recount (docs/FORMAT.md,
// broker trees): per destination, the message count and bytes, every
// message decoding and reachable by its ID, the reference count of every
// message equal to the number of subscriptions it is pending for (1 for a
// queue), every prepared transaction decoding, the id counter of 8 bytes
// and above every id in use, and no tree of the namespace that belongs to
// no destination or subscription. kdb.DB.Check checks the engine (pages,
// journal, values); this checks what the broker keeps in it. Problems come back as an error wrapping kdb.ErrCorrupt.
func (b *Broker) Check() error {
	return b.view(func(s snap) error { return s.check() })
}

func (s snap) check() error {
	known := map[string]bool{destsTree: true, ctrTree: true, subsTree: true, txTree: true, goneTree: true}
	var maxID uint64
	if v, ok, err := s.get(ctrTree, []byte("ids")); err != nil {
		return err
	} else if ok && len(v) != 8 {
		return fmt.Errorf("%w: broker id counter (tree %q, key \"ids\"): record of %d bytes, want 8", kdb.ErrCorrupt, ctrTree, len(v))
	} else if ok {
		maxID = binary.LittleEndian.Uint64(v)
	}
	dests, err := s.dests()
	if err != nil {
		return err
	}
	for _, d := range dests {
		k := d.key
		if checkDest(DestKind(k[0]), string(k[1:])) != nil || d.id >= maxID || d.nextSeq == 0 {
			return fmt.Errorf("%w: broker destination %q: bad key or id %d (next id %d)", kdb.ErrCorrupt, k, d.id, maxID)
		}
		if err := s.checkDest(d, known, maxID); err != nil {
			return fmt.Errorf("broker destination %q: %w", d.key[1:], err)
		}
	}
	// Every subscription belongs to a topic that exists (DeleteDestination
	// removes a topic's subscriptions with it).
	topics := map[uint64]bool{}
	topicName := map[uint64]string{}
	for _, d := range dests {
		if DestKind(d.key[0]) == Topic {
			topics[d.id] = true
			topicName[d.id] = string(d.key[1:])
		}
	}
	// So does every gone subscription (an Unsubscribe not finished), and
	// its record names the topic.
	git := s.s.Iter(goneTree)
	for ok := git.First(); ok; ok = git.Next() {
		k, v := git.Key(), git.Value()
		if v == nil {
			break // Err says why
		}
		if len(k) != 16 || !topics[binary.BigEndian.Uint64(k)] || topicName[binary.BigEndian.Uint64(k)] != string(v) {
			return fmt.Errorf("%w: broker gone subscription record %x (topic %q) names no topic", kdb.ErrCorrupt, k, v)
		}
	}
	if err := git.Err(); err != nil {
		return err
	}
	sit := s.s.Iter(subsTree)
	for ok := sit.First(); ok; ok = sit.Next() {
		k := sit.Key()
		if len(k) < 8 || !topics[binary.BigEndian.Uint64(k)] {
			return fmt.Errorf("%w: broker subscription record %q names no topic", kdb.ErrCorrupt, k)
		}
	}
	if err := sit.Err(); err != nil {
		return err
	}
	it := s.s.Iter(txTree)
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		if v == nil {
			break
		}
		if _, err := decodeTx(v); err != nil {
			return fmt.Errorf("prepared transaction %q: %w", k, err)
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	names, err := s.s.Indexes()
	if err != nil {
		return err
	}
	for _, n := range names {
		if !known[n] {
			return fmt.Errorf("%w: broker tree %q belongs to no destination or subscription", kdb.ErrCorrupt, n)
		}
	}
	return nil
}

func (s snap) checkDest(d *destRec, known map[string]bool, maxID uint64) error {
	mt, ht, xt := idTree(msgPrefix, d.id), idTree(hdrPrefix, d.id), idTree(idPrefix, d.id)
	for _, p := range []string{msgPrefix, hdrPrefix, idPrefix, prodPrefix} {
		known[idTree(p, d.id)] = true
	}
	refs := map[uint64]uint32{}
	var count, nbytes uint64
	it := s.s.Iter(mt)
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		m, err := decodeMsg(it)
		if err != nil {
			return err
		}
		if m.Seq == 0 || m.Seq >= d.nextSeq {
			return fmt.Errorf("%w: message seq %d, next %d", kdb.ErrCorrupt, m.Seq, d.nextSeq)
		}
		hv, ok, err := s.get(ht, k)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: message %d has no header", kdb.ErrCorrupt, m.Seq)
		}
		r, size, id, err := decodeHdr(hv)
		if err != nil {
			return err
		}
		if string(id) != m.ID || int(size) != len(encodeMessage(&m)) || r == 0 {
			return fmt.Errorf("%w: message %d: header (refs %d, size %d, ID %q) disagrees with the message (ID %q)", kdb.ErrCorrupt, m.Seq, r, size, id, m.ID)
		}
		xv, ok, err := s.get(xt, []byte(m.ID))
		if err != nil {
			return err
		}
		if !ok || len(xv) != 8 || binary.LittleEndian.Uint64(xv) != m.Seq {
			return fmt.Errorf("%w: message %d: ID %q not indexed to it", kdb.ErrCorrupt, m.Seq, m.ID)
		}
		refs[m.Seq] = r
		count++
		nbytes += uint64(size)
	}
	if err := it.Err(); err != nil {
		return err
	}
	lenOf := func(name string) uint64 {
		n, _ := s.s.Len(name)
		return n
	}
	if count != d.count || nbytes != d.nbytes || lenOf(mt) != count || lenOf(ht) != count || lenOf(xt) != count {
		return fmt.Errorf("%w: recorded %d messages of %d bytes, counted %d of %d (trees: %d, %d headers, %d IDs)",
			kdb.ErrCorrupt, d.count, d.nbytes, count, nbytes, lenOf(mt), lenOf(ht), lenOf(xt))
	}
	// The producers' last sequence numbers (duplicate detection): each
	// an 8-byte value under a producer ID, which a Send reads and
	// refuses otherwise (ErrCorrupt, at the next message of that
	// producer).
	pt := s.s.Iter(idTree(prodPrefix, d.id))
	for ok := pt.First(); ok; ok = pt.Next() {
		if k := pt.Key(); len(k) == 0 || len(k) > MaxNameSize {
			return fmt.Errorf("%w: producer ID of %d bytes", kdb.ErrCorrupt, len(k))
		}
		if len(pt.Value()) != 8 {
			return fmt.Errorf("%w: producer %q: value of %d bytes, want 8", kdb.ErrCorrupt, pt.Key(), len(pt.Value()))
		}
	}
	if err := pt.Err(); err != nil {
		return err
	}
	_, ids, err := listSubs(s.s.Iter(subsTree), d)
	if err != nil {
		return err
	}
	gs, err := gone(s.s.Iter(goneTree), d.id)
	if err != nil {
		return err
	}
	if DestKind(d.key[0]) == Queue && len(ids)+len(gs) > 0 {
		return fmt.Errorf("%w: a queue with subscriptions", kdb.ErrCorrupt)
	}
	for _, g := range gs {
		ids = append(ids, g.sub) // its pending entries hold references still
	}
	pending := map[uint64]uint32{}
	for _, id := range ids {
		if id >= maxID {
			return fmt.Errorf("%w: subscription id %d (next id %d)", kdb.ErrCorrupt, id, maxID)
		}
		pt := idTree(pendPrefix, id)
		known[pt] = true
		it := s.s.Iter(pt)
		n := uint64(0)
		for ok := it.First(); ok; ok = it.Next() {
			k := it.Key()
			if len(k) != 8 {
				return fmt.Errorf("%w: pending key of %d bytes", kdb.ErrCorrupt, len(k))
			}
			seq := binary.BigEndian.Uint64(k)
			if _, ok := refs[seq]; !ok {
				return fmt.Errorf("%w: subscription %d: pending message %d is missing", kdb.ErrCorrupt, id, seq)
			}
			pending[seq]++
			n++
		}
		if err := it.Err(); err != nil {
			return err
		}
		if n != lenOf(pt) {
			return fmt.Errorf("%w: subscription %d: %d pending recorded, %d counted", kdb.ErrCorrupt, id, lenOf(pt), n)
		}
	}
	for seq, r := range refs {
		want := uint32(1)
		if DestKind(d.key[0]) == Topic {
			want = pending[seq]
		}
		if r != want {
			return fmt.Errorf("%w: message %d: %d references recorded, %d counted", kdb.ErrCorrupt, seq, r, want)
		}
	}
	return nil
}
