package kdb

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/cespare/xxhash/v2"
	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/vfs"
)

// Snapshot file, FORMAT.md §6. These values are part of the format.
const (
	exportMagic   = 0x584244_4b // "KDBX"
	exportVersion = 1

	exportTree = 1 // a tree: name
	exportKV   = 2 // a key of the last tree: key, value
	exportEnd  = 3 // trailer: records before it (u64), xxhash64 of every byte before the trailer (u64)

	maxExportField = MaxValueSize + 1<<10 // bound on any length field read back
)

// ExportReport counts what Export wrote or Import read.
type ExportReport struct {
	Trees, Keys, Bytes uint64
}

// Export writes a portable snapshot of the whole store to w: every tree
// (user indexes and the broker's destinations, messages, subscriptions,
// producer audit and prepared transactions) with every key and its value,
// values kept in the journal included, from one consistent View. The
// engine's own bookkeeping (journal reference counts) is left out: Import
// rebuilds it. The format is FORMAT.md §6. Export is one long View: writes,
// checkpoints and journal GC go on meanwhile (GC keeps the segments it
// reads until it ends); if Close gives up waiting for it (Options.CloseWait)
// it returns ErrClosed.
func (db *DB) Export(w io.Writer) (*ExportReport, error) {
	rep := &ExportReport{}
	h := xxhash.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 1<<20)
	var records uint64
	var hdr [8]byte
	binary.LittleEndian.PutUint32(hdr[:], exportMagic)
	binary.LittleEndian.PutUint32(hdr[4:], exportVersion)
	if _, err := bw.Write(hdr[:]); err != nil {
		return rep, err
	}
	field := func(b []byte) error {
		if _, err := bw.Write(binary.AppendUvarint(nil, uint64(len(b)))); err != nil {
			return err
		}
		_, err := bw.Write(b)
		return err
	}
	err := db.View(func(s *Snapshot) error {
		names, err := s.trees()
		if err != nil {
			return err
		}
		for _, name := range names {
			if string(name) == segRefsTree {
				continue
			}
			t, err := s.openTree(name)
			if err != nil {
				return err
			}
			if t == nil {
				return fmt.Errorf("%w: tree %q listed but missing", ErrCorrupt, name)
			}
			if err := bw.WriteByte(exportTree); err != nil {
				return err
			}
			if err := field(name); err != nil {
				return err
			}
			records++
			rep.Trees++
			c := t.cursor()
			for k, v, ok := c.first(); ok; k, v, ok = c.next() {
				// A long export may outlast Close's wait: stop cleanly.
				if err := s.usable(); err != nil {
					return err
				}
				val, err := db.resolve(v)
				if err != nil {
					return fmt.Errorf("tree %q key %q: %w", name, k, err)
				}
				if err := bw.WriteByte(exportKV); err != nil {
					return err
				}
				if err := field(k); err != nil {
					return err
				}
				if err := field(val); err != nil {
					return err
				}
				records++
				rep.Keys++
				rep.Bytes += uint64(len(k) + len(val))
			}
			if c.err != nil {
				return c.err
			}
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	if err := bw.Flush(); err != nil {
		return rep, err
	}
	// The trailer is not part of its own checksum.
	trailer := []byte{exportEnd}
	trailer = binary.LittleEndian.AppendUint64(trailer, records)
	trailer = binary.LittleEndian.AppendUint64(trailer, h.Sum64())
	_, err = w.Write(trailer)
	return rep, err
}

// ErrNotEmpty is returned by Import for a directory that already holds a
// store.
var ErrNotEmpty = errors.New("kdb: store is not empty")

// Import creates a new store in dir from a snapshot written by Export, and
// closes it. dir must not hold a store (ErrNotEmpty). A damaged or truncated
// snapshot is ErrCorrupt, and then the half-imported store is left in dir
// for the caller to remove. opts may be nil.
func Import(dir string, r io.Reader, opts *Options) (*ExportReport, error) {
	o := opts.withDefaults()
	if ok, err := vfs.Exists(o.FS, filepath.Join(dir, "db.data")); err != nil {
		return nil, err
	} else if ok {
		return nil, fmt.Errorf("%w: %s", ErrNotEmpty, dir)
	}
	db, err := Open(dir, opts)
	if err != nil {
		return nil, err
	}
	rep, err := db.importFrom(r)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return rep, err
}

func (db *DB) importFrom(r io.Reader) (*ExportReport, error) {
	rep := &ExportReport{}
	h := xxhash.New()
	br := bufio.NewReaderSize(r, 1<<20)
	tr := io.TeeReader(br, h)
	corrupt := func(format string, a ...any) error {
		return fmt.Errorf("%w: snapshot: "+format, append([]any{ErrCorrupt}, a...)...)
	}
	var hdr [8]byte
	if _, err := io.ReadFull(tr, hdr[:]); err != nil {
		return rep, corrupt("header: %v", err)
	}
	if binary.LittleEndian.Uint32(hdr[:]) != exportMagic {
		return rep, corrupt("bad magic")
	}
	if v := binary.LittleEndian.Uint32(hdr[4:]); v != exportVersion {
		return rep, fmt.Errorf("%w: snapshot version %d, want %d", ErrVersionMismatch, v, exportVersion)
	}
	byteReader := readerByte{tr}
	field := func() ([]byte, error) {
		n, err := binary.ReadUvarint(byteReader)
		if err != nil {
			return nil, corrupt("length: %v", err)
		}
		if n > maxExportField {
			return nil, corrupt("field of %d bytes", n)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(tr, b); err != nil {
			return nil, corrupt("field: %v", err)
		}
		return b, nil
	}
	var (
		tree    []byte
		ops     []op
		size    int
		records uint64
		empty   [][]byte // trees that hold no key
		treeNew bool     // the current tree has had no key yet
	)
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		err := func() error {
			db.writeMu.RLock()
			defer db.writeMu.RUnlock()
			return db.commit(ops)
		}()
		ops, size = ops[:0], 0
		return err
	}
	for {
		var kind [1]byte
		if _, err := io.ReadFull(br, kind[:]); err != nil {
			return rep, corrupt("truncated after %d records: %v", records, err)
		}
		if kind[0] == exportEnd {
			break
		}
		h.Write(kind[:])
		switch kind[0] {
		case exportTree:
			name, err := field()
			if err != nil {
				return rep, err
			}
			if len(name) == 0 || bytes.Equal(name, []byte(segRefsTree)) {
				return rep, corrupt("tree name %q", name)
			}
			if treeNew {
				empty = append(empty, tree)
			}
			tree, treeNew = name, true
			rep.Trees++
		case exportKV:
			if tree == nil {
				return rep, corrupt("key before any tree")
			}
			k, err := field()
			if err != nil {
				return rep, err
			}
			v, err := field()
			if err != nil {
				return rep, err
			}
			if len(k) == 0 || len(k) > MaxKeySize || len(v) > MaxValueSize {
				return rep, corrupt("key of %d bytes, value of %d bytes", len(k), len(v))
			}
			ops = append(ops, op{kind: opPut, tree: tree, key: k, value: v})
			treeNew = false
			size += len(tree) + len(k) + len(v) + 64
			rep.Keys++
			rep.Bytes += uint64(len(k) + len(v))
			if size >= db.maxGroup/4 || len(ops) >= db.opts.CommitGroupOps {
				if err := flush(); err != nil {
					return rep, err
				}
			}
		default:
			return rep, corrupt("record type %d", kind[0])
		}
		records++
	}
	var trailer [16]byte
	if _, err := io.ReadFull(br, trailer[:]); err != nil {
		return rep, corrupt("trailer: %v", err)
	}
	if n := binary.LittleEndian.Uint64(trailer[:]); n != records {
		return rep, corrupt("trailer counts %d records, read %d", n, records)
	}
	if sum := binary.LittleEndian.Uint64(trailer[8:]); sum != h.Sum64() {
		return rep, corrupt("checksum mismatch")
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return rep, corrupt("bytes after the trailer")
	}
	if treeNew {
		empty = append(empty, tree)
	}
	if err := flush(); err != nil {
		return rep, err
	}
	// Trees without keys have no journal operation that creates them. They
	// are created in the index directly; Import's Close checkpoints them
	// (a crash before that leaves an import the caller must redo anyway).
	if len(empty) == 0 {
		return rep, nil
	}
	return rep, db.ix.Update(func(tx *index.Tx) error {
		for _, name := range empty {
			t, err := tx.OpenTree(name)
			if err != nil {
				return err
			}
			if t == nil {
				if _, err := tx.CreateTree(name); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// readerByte adapts an io.Reader to io.ByteReader one byte at a time.
type readerByte struct{ r io.Reader }

func (b readerByte) ReadByte() (byte, error) {
	var c [1]byte
	_, err := io.ReadFull(b.r, c[:])
	return c[0], err
}
