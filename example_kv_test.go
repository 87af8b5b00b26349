package kdb_test

import (
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/kdb-project/kdb"
)

// openKV opens a new store in a temporary directory; done closes it and
// removes the directory.
func openKV() (db *kdb.DB, done func()) {
	dir, err := os.MkdirTemp("", "kdb-example-kv")
	if err != nil {
		log.Fatal(err)
	}
	db, err = kdb.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	return db, func() {
		if err := db.Close(); err != nil {
			log.Fatal(err)
		}
		_ = os.RemoveAll(dir)
	}
}

// Open creates a store in an empty directory, or opens (and recovers) the
// one it holds.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "kdb-example-open")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	db, err := kdb.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := db.Put("config", []byte("mode"), []byte("fast")); err != nil {
		log.Fatal(err)
	}
	if err := db.Close(); err != nil {
		log.Fatal(err)
	}

	// Reopened, the store has every acknowledged write.
	db, err = kdb.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	v, err := db.Get("config", []byte("mode"))
	fmt.Printf("%s %v\n", v, err)
	// Output:
	// fast <nil>
}

// Put is durable when it returns; Get reads the latest value, or
// ErrNotFound.
func ExampleDB_Put() {
	db, done := openKV()
	defer done()

	if err := db.Put("users", []byte("alice"), []byte("admin")); err != nil {
		log.Fatal(err)
	}
	if err := db.Put("users", []byte("alice"), []byte("owner")); err != nil {
		log.Fatal(err)
	}
	v, err := db.Get("users", []byte("alice"))
	fmt.Printf("%s %v\n", v, err)

	if err := db.Delete("users", []byte("alice")); err != nil {
		log.Fatal(err)
	}
	_, err = db.Get("users", []byte("alice"))
	fmt.Println(errors.Is(err, kdb.ErrNotFound))
	// Output:
	// owner <nil>
	// true
}

// Get returns a copy of the value, or ErrNotFound for a missing key or
// index.
func ExampleDB_Get() {
	db, done := openKV()
	defer done()

	if err := db.Put("users", []byte("bob"), []byte("reader")); err != nil {
		log.Fatal(err)
	}
	v, err := db.Get("users", []byte("bob"))
	fmt.Printf("%s %v\n", v, err)
	_, err = db.Get("users", []byte("carol"))
	fmt.Println(errors.Is(err, kdb.ErrNotFound))
	_, err = db.Get("no-such-index", []byte("bob"))
	fmt.Println(errors.Is(err, kdb.ErrNotFound))
	// Output:
	// reader <nil>
	// true
	// true
}

// A Batch applies puts and deletes, across indexes, all or nothing: after a
// crash either every operation of a written batch is there or none is.
func ExampleBatch() {
	db, done := openKV()
	defer done()

	if err := db.Put("stock", []byte("apples"), []byte("10")); err != nil {
		log.Fatal(err)
	}
	b := kdb.NewBatch()
	b.Put("orders", []byte("o-1"), []byte("3 apples"))
	b.Put("stock", []byte("apples"), []byte("7"))
	b.Delete("stock", []byte("pears"))
	if err := b.Err(); err != nil { // an invalid index name or key
		log.Fatal(err)
	}
	if err := db.Write(b); err != nil {
		log.Fatal(err)
	}
	o, _ := db.Get("orders", []byte("o-1"))
	s, _ := db.Get("stock", []byte("apples"))
	fmt.Printf("%d operations: %s, %s left\n", b.Len(), o, s)
	// Output:
	// 3 operations: 3 apples, 7 left
}

// Update reads and writes in one serializable transaction: here a transfer
// that must not overdraw. Returning an error writes nothing.
func ExampleDB_Update() {
	db, done := openKV()
	defer done()

	b := kdb.NewBatch()
	b.Put("accounts", []byte("alice"), []byte("100"))
	b.Put("accounts", []byte("bob"), []byte("0"))
	if err := db.Write(b); err != nil {
		log.Fatal(err)
	}

	transfer := func(from, to string, amount int) error {
		return db.Update(func(tx *kdb.Txn) error {
			var fromBal, toBal int
			for _, a := range []struct {
				name string
				bal  *int
			}{{from, &fromBal}, {to, &toBal}} {
				v, err := tx.Get("accounts", []byte(a.name))
				if err != nil {
					return err
				}
				if _, err := fmt.Sscan(string(v), a.bal); err != nil {
					return err
				}
			}
			if fromBal < amount {
				return fmt.Errorf("%s has %d, cannot send %d", from, fromBal, amount)
			}
			if err := tx.Put("accounts", []byte(from), fmt.Append(nil, fromBal-amount)); err != nil {
				return err
			}
			return tx.Put("accounts", []byte(to), fmt.Append(nil, toBal+amount))
		})
	}
	fmt.Println(transfer("alice", "bob", 30))
	fmt.Println(transfer("alice", "bob", 80))

	a, _ := db.Get("accounts", []byte("alice"))
	c, _ := db.Get("accounts", []byte("bob"))
	fmt.Printf("alice %s, bob %s\n", a, c)
	// Output:
	// <nil>
	// alice has 70, cannot send 80
	// alice 70, bob 30
}

// View reads a consistent snapshot; an Iter walks an index in key order
// from a Seek position (Key and Value are valid until the next move:
// copy them to keep them).
func ExampleDB_View() {
	db, done := openKV()
	defer done()

	b := kdb.NewBatch()
	for _, k := range []string{"2026-11-29", "2026-11-30", "2026-12-01", "2026-12-02"} {
		b.Put("events", []byte(k), []byte("deploy "+k[5:]))
	}
	if err := db.Write(b); err != nil {
		log.Fatal(err)
	}

	err := db.View(func(s *kdb.Snapshot) error {
		n, err := s.Len("events")
		if err != nil {
			return err
		}
		fmt.Println(n, "events; from 2026-11-30 on:")
		it := s.Iter("events")
		for ok := it.Seek([]byte("2026-11-30")); ok; ok = it.Next() {
			fmt.Printf("%s: %s\n", it.Key(), it.Value())
		}
		return it.Err()
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// 4 events; from 2026-11-30 on:
	// 2026-11-30: deploy 11-30
	// 2026-12-01: deploy 12-01
	// 2026-12-02: deploy 12-02
}

// All ranges over an index in key order; check Err after the loop. Breaking
// out early is fine, and leaves the iterator on the last key seen.
func ExampleIter_All() {
	db, done := openKV()
	defer done()

	b := kdb.NewBatch()
	for i, name := range []string{"ada", "bea", "cy", "dee", "eve"} {
		b.Put("people", []byte(name), fmt.Append(nil, 30+i))
	}
	if err := db.Write(b); err != nil {
		log.Fatal(err)
	}

	err := db.View(func(s *kdb.Snapshot) error {
		it := s.Iter("people")
		for k, v := range it.All() {
			fmt.Printf("%s is %s\n", k, v)
		}
		if err := it.Err(); err != nil {
			return err
		}

		// The first person of at least 32.
		for k, v := range it.All() {
			if string(v) >= "32" {
				fmt.Printf("first of 32 or more: %s\n", k)
				break
			}
		}
		it.Next()
		fmt.Printf("after them: %s\n", it.Key())
		return it.Err()
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// ada is 30
	// bea is 31
	// cy is 32
	// dee is 33
	// eve is 34
	// first of 32 or more: cy
	// after them: dee
}
