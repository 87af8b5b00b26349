// Package peers benchmarks kdb against peer embedded engines (bbolt, Pebble)
// on the same workloads in the same run. See README.md in this directory.
package peers

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/kdb-project/kdb"
	bolt "go.etcd.io/bbolt"
)

// DB is the part of an engine the benchmarks use.
type DB interface {
	// Put stores key=value; on return it is durable (fsync'd), unless the
	// store was opened for loading.
	Put(key, value []byte) error
	// Get returns a copy of the value, or an error if missing.
	Get(key []byte) ([]byte, error)
	// Close closes cleanly.
	Close() error
}

// Settler is implemented by engines that defer page writes past a
// durable commit: Settle writes what the commits left to write later (kdb:
// a checkpoint of the dirty index pages; Pebble: a flush of the memtable),
// so that a write benchmark can charge it to the writes. bbolt writes its
// pages inside every commit and has nothing to settle.
type Settler interface {
	Settle() error
	// Checkpoints returns the number of checkpoints (or flushes) so far.
	Checkpoints() uint64
}

// Engine opens a store of one engine in a directory.
type Engine struct {
	Name string
	// Open opens (creating if needed) the store in dir. load=true turns
	// fsync off for bulk loading (the build is not what is measured);
	// load=false is the durable mode every measured write uses.
	Open func(dir string, load bool) (DB, error)
	// Batch writes a batch of puts in one transaction (for loading).
	Batch func(db DB, keys, values [][]byte) error
	// Store names the engine whose stores this one opens (built and
	// crashed by that engine); "" means its own. kdb-scan opens kdb's.
	Store string
	// OpenOnly limits the engine to the open-after-crash workloads.
	OpenOnly bool
}

// StoreName is the engine that builds, crashes and owns e's stores.
func (e Engine) StoreName() string {
	if e.Store != "" {
		return e.Store
	}
	return e.Name
}

// Engines is the list, in the order the benchmarks alternate them.
var Engines = []Engine{
	{Name: "kdb", Open: func(dir string, load bool) (DB, error) { return openKDB(dir, load, false) }, Batch: batchKDB},
	// kdb-scan opens the same crashed kdb store with ForceFreeListScan:
	// db.free is ignored and the free list is rebuilt by reading every page
	// header, the same code path recovery takes when db.free is missing,
	// damaged or carries another checkpoint ID than the metadata.
	{Name: "kdb-scan", Open: func(dir string, load bool) (DB, error) { return openKDB(dir, load, true) }, Batch: batchKDB, Store: "kdb", OpenOnly: true},
	{Name: "bbolt", Open: func(dir string, load bool) (DB, error) { return openBolt(dir, load, false) }, Batch: batchBolt},
	{Name: "bbolt-nofreelistsync", Open: func(dir string, load bool) (DB, error) { return openBolt(dir, load, true) }, Batch: batchBolt},
	{Name: "pebble", Open: openPebble, Batch: batchPebble},
}

// EngineByName returns the engine called name.
func EngineByName(name string) (Engine, error) {
	for _, e := range Engines {
		if e.Name == name {
			return e, nil
		}
	}
	return Engine{}, fmt.Errorf("unknown engine %q", name)
}

// ---- kdb ----

const kdbIndex = "peers"

type kdbDB struct{ db *kdb.DB }

func openKDB(dir string, load, forceScan bool) (DB, error) {
	opts := &kdb.Options{ForceFreeListScan: forceScan} // Sync: SyncAlways (default)
	if load {
		opts = &kdb.Options{
			ValueThreshold:       -1,
			Sync:                 kdb.UnsafeSyncNever,
			CheckpointInterval:   -1,
			CheckpointDirtyPages: 16384,
			ForceFreeListScan:    forceScan,
		}
	}
	db, err := kdb.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	return &kdbDB{db}, nil
}

func (d *kdbDB) Put(k, v []byte) error        { return d.db.Put(kdbIndex, k, v) }
func (d *kdbDB) Get(k []byte) ([]byte, error) { return d.db.Get(kdbIndex, k) }
func (d *kdbDB) Close() error                 { return d.db.Close() }
func (d *kdbDB) Settle() error                { return d.db.Checkpoint() }
func (d *kdbDB) Checkpoints() uint64          { return d.db.Stats().Checkpoints }
func (d *kdbDB) Recovery() kdb.RecoveryReport { return d.db.Recovery() }

// checkRecovery checks that an open of engine name took the free-list path
// the engine stands for: kdb trusted db.free and scanned no page; kdb-scan
// rebuilt the free list by scanning pages. Other engines pass.
func checkRecovery(name string, r kdb.RecoveryReport) error {
	switch name {
	case "kdb":
		if r.FreeListPath != "trusted" || r.PagesScanned != 0 {
			return fmt.Errorf("kdb: free list %s (%s), %d pages scanned; want trusted, 0 scanned", r.FreeListPath, r.Reason, r.PagesScanned)
		}
	case "kdb-scan":
		if r.FreeListPath != "scanned" || r.PagesScanned == 0 {
			return fmt.Errorf("kdb-scan: free list %s (%s), %d pages scanned; want scanned, > 0", r.FreeListPath, r.Reason, r.PagesScanned)
		}
	}
	return nil
}

func batchKDB(db DB, keys, values [][]byte) error {
	b := kdb.NewBatch()
	for i := range keys {
		b.Put(kdbIndex, keys[i], values[i])
	}
	return db.(*kdbDB).db.Write(b)
}

// ---- bbolt ----

var boltBucket = []byte("peers")

type boltDB struct{ db *bolt.DB }

func openBolt(dir string, load, noFreelistSync bool) (DB, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	db, err := bolt.Open(filepath.Join(dir, "bolt.db"), 0o600, &bolt.Options{
		NoFreelistSync: noFreelistSync,
		NoSync:         load,
		FreelistType:   bolt.FreelistArrayType, // the default
	})
	if err != nil {
		return nil, err
	}
	// Create the bucket only if missing, so that an open of an existing
	// store (what open-after-crash times) writes nothing.
	exists := false
	_ = db.View(func(tx *bolt.Tx) error { exists = tx.Bucket(boltBucket) != nil; return nil })
	if !exists && !db.IsReadOnly() {
		err = db.Update(func(tx *bolt.Tx) error {
			_, err := tx.CreateBucketIfNotExists(boltBucket)
			return err
		})
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return &boltDB{db}, nil
}

func (d *boltDB) Put(k, v []byte) error {
	return d.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(boltBucket).Put(k, v) })
}

func (d *boltDB) Get(k []byte) ([]byte, error) {
	var out []byte
	err := d.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(boltBucket).Get(k)
		if v == nil {
			return errors.New("bbolt: not found")
		}
		out = append([]byte(nil), v...)
		return nil
	})
	return out, err
}

func (d *boltDB) Close() error { return d.db.Close() }

func batchBolt(db DB, keys, values [][]byte) error {
	return db.(*boltDB).db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(boltBucket)
		for i := range keys {
			if err := bk.Put(keys[i], values[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// ---- pebble ----

type pebbleDB struct {
	db *pebble.DB
	wo *pebble.WriteOptions
}

func openPebble(dir string, load bool) (DB, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return nil, err
	}
	wo := pebble.Sync
	if load {
		wo = pebble.NoSync
	}
	return &pebbleDB{db, wo}, nil
}

func (d *pebbleDB) Put(k, v []byte) error { return d.db.Set(k, v, d.wo) }

func (d *pebbleDB) Get(k []byte) ([]byte, error) {
	v, c, err := d.db.Get(k)
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), v...)
	return out, c.Close()
}

func (d *pebbleDB) Settle() error { return d.db.Flush() }

func (d *pebbleDB) Checkpoints() uint64 { return uint64(d.db.Metrics().Flush.Count) }

func (d *pebbleDB) Close() error {
	if d.wo == pebble.NoSync {
		if err := d.db.Flush(); err != nil {
			d.db.Close()
			return err
		}
	}
	return d.db.Close()
}

func batchPebble(db DB, keys, values [][]byte) error {
	d := db.(*pebbleDB)
	b := d.db.NewBatch()
	for i := range keys {
		if err := b.Set(keys[i], values[i], nil); err != nil {
			return err
		}
	}
	return b.Commit(d.wo)
}

// quietLogger drops Pebble's informational messages ("Found 0 WALs"), which
// would interleave with the benchmark output.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}
func (quietLogger) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}
