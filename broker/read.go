package broker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kdb-project/kdb"
)

// snap is a read of the broker's trees inside one View.
type snap struct{ s *kdb.Snapshot }

func (b *Broker) view(fn func(s snap) error) error {
	return b.ns.View(func(s *kdb.Snapshot) error { return fn(snap{s}) })
}

// get returns the value of key in tree, or ok false.
func (s snap) get(tree string, key []byte) ([]byte, bool, error) {
	v, err := s.s.Get(tree, key)
	if errors.Is(err, kdb.ErrNotFound) {
		return nil, false, nil
	}
	return v, err == nil, err
}

func (s snap) destRec(kind DestKind, dest string) (*destRec, error) {
	if err := checkDest(kind, dest); err != nil {
		return nil, err
	}
	key := destKey(kind, dest)
	v, ok, err := s.get(destsTree, key)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s %q", kdb.ErrNotFound, kind, dest)
	}
	return decodeDestRec(key, v)
}

func (s snap) dests() ([]*destRec, error) {
	var out []*destRec
	it := s.s.Iter(destsTree)
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		if v == nil {
			break
		}
		if len(k) < 2 {
			return nil, fmt.Errorf("%w: broker destination key %q", kdb.ErrCorrupt, k)
		}
		d, err := decodeDestRec(k, v)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, it.Err()
}

// Destinations lists the destinations, queues first, each by name.
func (b *Broker) Destinations() ([]DestInfo, error) {
	var out []DestInfo
	err := b.view(func(s snap) error {
		ds, err := s.dests()
		for _, d := range ds {
			out = append(out, DestInfo{Kind: DestKind(d.key[0]), Name: string(d.key[1:]), Count: d.count, Bytes: d.nbytes, NextSeq: d.nextSeq})
		}
		return err
	})
	return out, err
}

// Destination describes one destination, or returns kdb.ErrNotFound.
func (b *Broker) Destination(kind DestKind, dest string) (DestInfo, error) {
	var out DestInfo
	err := b.view(func(s snap) error {
		d, err := s.destRec(kind, dest)
		if err != nil {
			return err
		}
		out = DestInfo{Kind: kind, Name: dest, Count: d.count, Bytes: d.nbytes, NextSeq: d.nextSeq}
		return nil
	})
	return out, err
}

// Read returns up to max messages of a destination in sequence order,
// starting at sequence number from. A negative max is kdb.ErrInvalid; a
// destination that does not exist (not created yet, or deleted) is
// kdb.ErrNotFound, even with max 0.
func (b *Broker) Read(kind DestKind, dest string, from uint64, max int) ([]Message, error) {
	if max < 0 {
		return nil, fmt.Errorf("%w: Read of %d messages", kdb.ErrInvalid, max)
	}
	var out []Message
	err := b.view(func(s snap) error {
		d, err := s.destRec(kind, dest)
		if err != nil {
			return err
		}
		it := s.s.Iter(idTree(msgPrefix, d.id))
		for ok := it.Seek(seqKey(from)); ok && len(out) < max; ok = it.Next() {
			m, err := decodeMsg(it)
			if err != nil {
				return err
			}
			out = append(out, m)
		}
		return it.Err()
	})
	return out, err
}

// decodeMsg decodes the message at the iterator.
func decodeMsg(it *kdb.Iter) (Message, error) {
	k, v := it.Key(), it.Value()
	if v == nil {
		return Message{}, it.Err()
	}
	return decodeMsgKV(k, v)
}

func decodeMsgKV(k, v []byte) (Message, error) {
	if len(k) != 8 {
		return Message{}, fmt.Errorf("%w: broker message key of %d bytes", kdb.ErrCorrupt, len(k))
	}
	m, err := decodeMessage(v)
	m.Seq = binary.BigEndian.Uint64(k)
	return m, err
}

// GetMessage returns the message with the given ID, or kdb.ErrNotFound.
func (b *Broker) GetMessage(kind DestKind, dest, id string) (*Message, error) {
	if err := checkName("message ID", id); err != nil {
		return nil, err
	}
	var out *Message
	err := b.view(func(s snap) error {
		d, err := s.destRec(kind, dest)
		if err != nil {
			return err
		}
		v, ok, err := s.get(idTree(idPrefix, d.id), []byte(id))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: message %q", kdb.ErrNotFound, id)
		}
		if len(v) != 8 {
			return fmt.Errorf("%w: message %q: ID index entry of %d bytes, want 8", kdb.ErrCorrupt, id, len(v))
		}
		k := seqKey(binary.LittleEndian.Uint64(v))
		raw, ok, err := s.get(idTree(msgPrefix, d.id), k)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: message %q: ID index points at missing %d", kdb.ErrCorrupt, id, binary.BigEndian.Uint64(k))
		}
		m, err := decodeMsgKV(k, raw)
		out = &m
		return err
	})
	return out, err
}

// Subscriptions lists a topic's durable subscriptions by name.
func (b *Broker) Subscriptions(topic string) ([]SubInfo, error) {
	var out []SubInfo
	err := b.view(func(s snap) error {
		d, err := s.destRec(Topic, topic)
		if err != nil {
			return err
		}
		names, ids, err := listSubs(s.s.Iter(subsTree), d)
		for i, n := range names {
			p, err := s.s.Len(idTree(pendPrefix, ids[i]))
			if err != nil {
				return err
			}
			out = append(out, SubInfo{Name: n, Pending: p})
		}
		return err
	})
	return out, err
}

func (s snap) subID(topic, sub string) (*destRec, uint64, error) {
	// A bad name is ErrInvalid whether the topic exists or not.
	if err := checkName("subscription name", sub); err != nil {
		return nil, 0, err
	}
	d, err := s.destRec(Topic, topic)
	if err != nil {
		return nil, 0, err
	}
	v, ok, err := s.get(subsTree, append(binary.BigEndian.AppendUint64(nil, d.id), sub...))
	if err != nil {
		return nil, 0, err
	}
	if !ok {
		return nil, 0, fmt.Errorf("%w: subscription %q of topic %q", kdb.ErrNotFound, sub, topic)
	}
	if len(v) != 16 {
		return nil, 0, fmt.Errorf("%w: broker subscription %q of topic %q: record of %d bytes, want 16", kdb.ErrCorrupt, sub, topic, len(v))
	}
	return d, binary.LittleEndian.Uint64(v), nil
}

// Pending returns the number of messages a subscription has not acked,
// without a scan. An unknown topic or subscription is kdb.ErrNotFound.
func (b *Broker) Pending(topic, sub string) (uint64, error) {
	var n uint64
	err := b.view(func(s snap) error {
		_, id, err := s.subID(topic, sub)
		if err != nil {
			return err
		}
		n, err = s.s.Len(idTree(pendPrefix, id))
		return err
	})
	return n, err
}

// ReadSub returns up to max messages pending for a subscription, in
// sequence order, starting at sequence number from (0 or 1: its position,
// the oldest message it has not acked). A negative max is kdb.ErrInvalid;
// an unknown topic or subscription is kdb.ErrNotFound.
func (b *Broker) ReadSub(topic, sub string, from uint64, max int) ([]Message, error) {
	if max < 0 {
		return nil, fmt.Errorf("%w: ReadSub of %d messages", kdb.ErrInvalid, max)
	}
	var out []Message
	err := b.view(func(s snap) error {
		d, id, err := s.subID(topic, sub)
		if err != nil {
			return err
		}
		mt := idTree(msgPrefix, d.id)
		it := s.s.Iter(idTree(pendPrefix, id))
		for ok := it.Seek(seqKey(from)); ok && len(out) < max; ok = it.Next() {
			k := bytes.Clone(it.Key())
			raw, ok, err := s.get(mt, k)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%w: subscription %q: pending message %x missing", kdb.ErrCorrupt, sub, k)
			}
			m, err := decodeMsgKV(k, raw)
			if err != nil {
				return err
			}
			out = append(out, m)
		}
		return it.Err()
	})
	return out, err
}
