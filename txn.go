package kdb

import (
	"bytes"
	"fmt"
)

// Txn is a read-write transaction: see DB.Update.
type Txn struct {
	db  *DB
	b   Batch
	s   *Snapshot
	own map[string]int // tree+"\x00"+key -> index of the last op on it in b.ops
}

// Update runs fn as one serializable transaction: fn's reads see every
// acknowledged write plus its own writes, no other write commits while fn
// runs, and fn's writes commit atomically when it returns nil (and are then
// durable). If fn returns an error nothing is written. Updates run one at a
// time; concurrent blind writes belong in Write.
//
// Inside fn, Get, View and Checkpoint work (Get and View see the committed
// state, without fn's writes); Update, Write, Put, Delete, the broker's
// writes and Close, which would wait for this Update to end, return
// ErrInvalid at once (see lifecycle.go).
func (db *DB) Update(fn func(tx *Txn) error) error {
	if err := db.lockWrite("Update"); err != nil {
		return err
	}
	defer db.writeMu.Unlock()
	db.updater.Store(goid())
	defer db.updater.Store(0)
	db.mu.Lock()
	err := db.writableLocked()
	db.mu.Unlock()
	if err != nil {
		return err
	}
	tx := &Txn{db: db}
	err = db.View(func(s *Snapshot) error {
		tx.s = s
		defer func() { tx.s = nil }()
		return fn(tx)
	})
	if err != nil {
		return err
	}
	if tx.b.err != nil {
		return tx.b.err
	}
	if len(tx.b.ops) == 0 {
		return nil
	}
	return db.commit(tx.b.ops)
}

func ownKey(tree, key []byte) string {
	return string(tree) + "\x00" + string(key)
}

func (tx *Txn) live() error {
	if tx.s == nil {
		return fmt.Errorf("%w: transaction used after Update returned", ErrInvalid)
	}
	return nil
}

// Put sets key to value in the named index.
func (tx *Txn) Put(index string, key, value []byte) error {
	if err := tx.live(); err != nil {
		return err
	}
	tx.b.Put(index, key, value)
	return tx.record()
}

// Delete removes key from the named index.
func (tx *Txn) Delete(index string, key []byte) error {
	if err := tx.live(); err != nil {
		return err
	}
	tx.b.Delete(index, key)
	return tx.record()
}

func (tx *Txn) record() error {
	if tx.b.err != nil {
		return tx.b.err
	}
	if tx.own == nil {
		tx.own = make(map[string]int)
	}
	o := tx.b.ops[len(tx.b.ops)-1]
	tx.own[ownKey(o.tree, o.key)] = len(tx.b.ops) - 1
	return nil
}

// Get returns the value of key in the named index as this transaction sees
// it (its own writes included), or ErrNotFound.
func (tx *Txn) Get(index string, key []byte) ([]byte, error) {
	if err := tx.live(); err != nil {
		return nil, err
	}
	if i, ok := tx.own[ownKey(userTree(index), key)]; ok {
		o := tx.b.ops[i]
		if o.kind == opDelete {
			return nil, ErrNotFound
		}
		return bytes.Clone(o.value), nil
	}
	return tx.s.Get(index, key)
}
