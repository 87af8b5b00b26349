package kdb

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/internal/storefile"
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
	// Trees, Keys and Bytes count the trees, their keys, and the bytes of
	// those keys and values.
	Trees, Keys, Bytes uint64
	// StaleRemoved counts the temporary directories of interrupted Imports
	// into the same directory that Import removed before it began.
	StaleRemoved int
}

// Export writes a portable snapshot of the whole store to w: every tree
// (user indexes and the broker's destinations, messages, subscriptions,
// producer audit and prepared transactions) with every key and its value,
// values kept in the journal included, from one consistent View. The
// engine's own bookkeeping (journal reference counts) is left out: Import
// rebuilds it. The format is FORMAT.md §6. Export is one long View: writes,
// checkpoints and journal GC go on meanwhile (GC keeps the segments it
// reads until it ends); if Close gives up waiting for it (Options.CloseWait)
// it returns ErrClosed. Like every View it sees applied writes only: a
// deferred transaction (Namespace.Defer, a broker's AckAsync) that has not
// joined a batch yet is not in it; call Sync first to include them.
func (db *DB) Export(w io.Writer) (*ExportReport, error) {
	if w == nil {
		return nil, fmt.Errorf("%w: Export: nil writer", ErrInvalid)
	}
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
			// What Import refuses, Export refuses first: keys out of
			// order or a key count that is not the tree's (damaged pages
			// whose checksums hold, a duplicated child pointer) made an
			// export that ended "ok" and could never be imported.
			var prev []byte
			var n uint64
			c := t.cursor()
			for k, v, ok := c.first(); ok; k, v, ok = c.next() {
				// A long export may outlast Close's wait: stop cleanly.
				if err := s.usable(); err != nil {
					return err
				}
				if n > 0 && bytes.Compare(k, prev) <= 0 {
					return fmt.Errorf("%w: tree %q: key %q after %q: the index is out of order (kdbtool check names the damaged pages)", ErrCorrupt, name, k, prev)
				}
				prev = append(prev[:0], k...)
				n++
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
			if n != t.count {
				return fmt.Errorf("%w: tree %q holds %d keys, its count says %d (kdbtool check names the damage)", ErrCorrupt, name, n, t.count)
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

// ErrNotEmpty is returned by Import for a directory that is not empty
// (one that holds a store, or anything else) or a name that is a file.
var ErrNotEmpty = errors.New("kdb: store is not empty")

// importTempInfix names the temporary directory Import builds a store in:
// "." + base(dir) + importTempInfix + 16 hex digits, beside dir.
const importTempInfix = ".import-"

// Import creates a new store in dir from a snapshot written by Export, and
// closes it. dir must not exist, or be an empty directory (ErrNotEmpty
// otherwise), and must not lie inside a store's directory (ErrInvalid,
// naming the store, when its parent or any directory above it holds
// db.data; links resolved). opts may be nil.
//
// The import is atomic: the store is built in a new hidden directory beside
// dir (same parent, named "."+base(dir)+".import-" and 16 hex digits, mode
// 0750 before the umask), and renamed to dir only once the whole snapshot
// was read and verified and the store closed cleanly; then the parent
// directory is synced. So dir is, even after a crash or a kill at any
// moment, either absent (or the empty directory it was) or the whole
// imported store. On return (nil) the store at dir is durable (Close's
// checkpoint syncs it under every Options.Sync). An existing empty dir is
// removed just before the rename, and the new directory takes its place
// (with its own mode). A dir that is a symbolic link (on the OS file
// system) stands for the directory it points to, which gets the store (the
// link stays); a link to nothing is ErrInvalid.
//
// A damaged or truncated snapshot is ErrCorrupt; on any error the
// temporary directory is removed and dir is left as it was. Options with
// ReadOnly set are ErrInvalid. Before it creates anything for dir, Import
// takes a lock beside it ("."+base(dir)+".import.lock", removed once the
// store is in place; a failed or killed Import leaves it, empty, and the
// next reuses it: so that no two Imports ever build for dir at once): a
// second Import into the same dir while one runs
// fails at once with ErrLocked, and one that comes after the first put its
// store in place fails with ErrNotEmpty; neither touches the other's
// files. The parent directory of dir is created if missing, and stays.
// Import then removes what an interrupted Import into the same dir left
// (a temporary directory of that name) and counts it in
// ExportReport.StaleRemoved.
func Import(dir string, r io.Reader, opts *Options) (*ExportReport, error) {
	o := opts.withDefaults()
	fsys := o.FS
	if dir == "" {
		return nil, fmt.Errorf("%w: Import: empty directory name", ErrInvalid)
	}
	if r == nil {
		return nil, fmt.Errorf("%w: Import: nil reader", ErrInvalid)
	}
	if o.ReadOnly {
		return nil, fmt.Errorf("%w: Import: Options.ReadOnly: an import creates and writes the store", ErrInvalid)
	}
	dir = filepath.Clean(dir)
	if b := filepath.Base(dir); b == "." || b == ".." || b == string(filepath.Separator) {
		return nil, fmt.Errorf("%w: Import: %s: name a new directory (or an empty one by its name)", ErrInvalid, dir)
	}
	if fsys == vfs.OS {
		// A symbolic link names the directory it points to (a store on
		// another disk): the store is built beside that directory and
		// renamed into it, and the link stays. Taken as the name itself,
		// the link was removed as if it were the empty directory, and the
		// store landed beside it, on the link's file system.
		if st, err := os.Lstat(dir); err == nil && st.Mode()&os.ModeSymlink != 0 {
			real, err := filepath.EvalSymlinks(dir)
			if err != nil {
				return nil, fmt.Errorf("%w: Import: %s is a symbolic link to nothing (%v): name a new directory, or make the one it names", ErrInvalid, dir, err)
			}
			dir = real
		}
		// Absolute, as Open's: the import's files are created by name
		// over many calls, which a Chdir meanwhile would scatter.
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, fmt.Errorf("kdb: Import %s: %w", dir, err)
		}
		dir = abs
	}
	if err := importTarget(fsys, dir); err != nil {
		return nil, err
	}
	if err := notInsideAStore(fsys, dir); err != nil {
		return nil, err
	}
	parent, base := filepath.Dir(dir), filepath.Base(dir)
	// Claim dir before anything is created for it: a concurrent Import into
	// the same dir fails here at once (ErrLocked), or, once this one has put
	// its store in place, at the check below (ErrNotEmpty). Nothing else
	// removes or creates a temporary directory for dir meanwhile.
	claim, err := claimImport(fsys, parent, base)
	if err != nil {
		return nil, err
	}
	defer func() { _ = claim.Close() }()
	if err := importTarget(fsys, dir); err != nil {
		if errors.Is(err, ErrNotEmpty) {
			dropClaim(fsys, dir)
		}
		return nil, err
	}
	if err := notInsideAStore(fsys, dir); err != nil {
		// A store was put in place above dir meanwhile: the claim is
		// the only thing this Import made in it.
		dropClaim(fsys, dir)
		return nil, err
	}
	rep := &ExportReport{}
	removed, err := removeStaleImports(fsys, parent, base)
	rep.StaleRemoved = removed
	if err != nil {
		return rep, err
	}
	tmp, lk, err := makeImportTemp(fsys, parent, base)
	if err != nil {
		return rep, err
	}
	held := true
	defer func() {
		if held {
			_ = lk.Close()
		}
	}()
	fail := func(err error) (*ExportReport, error) {
		_ = lk.Close()
		held = false
		_ = removeFlatDir(fsys, tmp)
		_ = fsys.SyncDir(parent)
		return rep, err
	}
	var oo Options
	if opts != nil {
		oo = *opts
	}
	// The store is opened under the lock taken above, with no gap in
	// between: a concurrent Import never takes the directory for a stale one.
	oo.FS = importLockFS{FS: fsys, lock: filepath.Join(tmp, "lock")}
	db, err := Open(tmp, &oo)
	if err != nil {
		return fail(err)
	}
	irep, err := db.importFrom(r)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	rep.Trees, rep.Keys, rep.Bytes = irep.Trees, irep.Keys, irep.Bytes
	if err != nil {
		return fail(err)
	}
	// INVARIANT: Close took a checkpoint and synced tmp's files and tmp
	// itself; only the rename remains. dir was absent or empty just now.
	// An empty dir is removed first (os.Rename never replaces a
	// directory); a dir filled meanwhile makes that fail, never lose it.
	if err := fsys.Remove(dir); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		if terr := importTarget(fsys, dir); terr != nil {
			return fail(fmt.Errorf("%w (filled while the import ran)", terr))
		}
		return fail(fmt.Errorf("kdb: Import: removing the empty %s to rename the store into place: %w", dir, err))
	}
	if err := fsys.Rename(tmp, dir); err != nil {
		if terr := importTarget(fsys, dir); terr != nil {
			return fail(fmt.Errorf("%w (filled while the import ran)", terr))
		}
		return fail(err)
	}
	if err := fsys.SyncDir(parent); err != nil {
		return rep, fmt.Errorf("kdb: Import: sync %s after renaming the store into place: %w", parent, err)
	}
	dropClaim(fsys, dir)
	return rep, nil
}

// importClaimSuffix names the lock file an Import into dir holds while it
// runs: "." + base(dir) + importClaimSuffix, beside dir.
const importClaimSuffix = ".import.lock"

// claimImport takes the lock that makes an Import the only one into
// parent/base (creating parent if it is missing, and the lock file): a
// concurrent Import into the same directory gets ErrLocked.
//
// The lock file is removed (dropClaim) only while base holds a store, so
// whoever takes a lock on it (even on a name removed meanwhile) finds the
// store and stops with ErrNotEmpty: no two Imports ever build for base at
// once. A failed or killed Import leaves it, empty, for the next to reuse.
func claimImport(fsys vfs.FS, parent, base string) (vfs.Locker, error) {
	if err := vfs.MkdirAllDurable(fsys, parent, 0o750); err != nil {
		return nil, err
	}
	name := filepath.Join(parent, "."+base+importClaimSuffix)
	lk, err := fsys.Lock(name)
	if errors.Is(err, vfs.ErrLocked) {
		return nil, fmt.Errorf("%w: %s: another import into it is running (it holds %s): %w",
			ErrLocked, filepath.Join(parent, base), name, err)
	}
	return lk, err
}

// dropClaim removes the claim lock file of an Import into dir, which
// holds a store now. The caller holds the lock. Not synced: a claim file
// that comes back after a crash is only taken and found in the way of
// nothing (the store is there).
func dropClaim(fsys vfs.FS, dir string) {
	_ = fsys.Remove(filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+importClaimSuffix))
}

// importTarget checks that dir is absent or an empty directory.
func importTarget(fsys vfs.FS, dir string) error {
	_, isDir, err := fsys.Stat(dir)
	if errors.Is(err, iofs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !isDir {
		return fmt.Errorf("%w: %s exists and is not a directory", ErrNotEmpty, dir)
	}
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if n == "db.data" {
			return fmt.Errorf("%w: %s holds a store", ErrNotEmpty, dir)
		}
	}
	if len(names) > 0 {
		return fmt.Errorf("%w: %s is not empty (%d entries)", ErrNotEmpty, dir, len(names))
	}
	return nil
}

// notInsideAStore returns ErrInvalid, naming the store, if a directory
// above dir (its parent, or one above that, up to the root) holds a store:
// a store's directory holds the store's own files only (Open, repair and
// the import's own cleanup treat it as flat), and a store built inside it
// would be copied, moved and deleted with it.
func notInsideAStore(fsys vfs.FS, dir string) error {
	store, err := storefile.Above(fsys, dir)
	if err != nil {
		return fmt.Errorf("kdb: Import: %s: looking for a store above it: %w", dir, err)
	}
	if store != "" {
		return fmt.Errorf("%w: Import: %s is inside the store %s (it holds db.data): a store's directory holds only the store's own files; name a directory outside it",
			ErrInvalid, dir, store)
	}
	return nil
}

// isImportTemp reports whether name is a temporary directory name of an
// Import into base.
func isImportTemp(name, base string) bool {
	rest, ok := strings.CutPrefix(name, "."+base+importTempInfix)
	if !ok || len(rest) != 16 {
		return false
	}
	_, err := hex.DecodeString(rest)
	return err == nil
}

// removeStaleImports removes the temporary directories interrupted
// Imports into parent/base left: those whose store lock it can take. It
// returns how many it removed.
func removeStaleImports(fsys vfs.FS, parent, base string) (int, error) {
	names, err := fsys.ReadDir(parent)
	if errors.Is(err, iofs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, n := range names {
		if !isImportTemp(n, base) {
			continue
		}
		p := filepath.Join(parent, n)
		if _, isDir, err := fsys.Stat(p); err != nil || !isDir {
			continue
		}
		lk, err := vfs.LockStore(fsys, p)
		if err != nil {
			continue // in use by a running Import, or gone meanwhile
		}
		err = lk.Close()
		if err == nil {
			err = removeFlatDir(fsys, p)
		}
		if err != nil {
			return removed, fmt.Errorf("kdb: Import: removing %s, left by an interrupted import: %w", p, err)
		}
		removed++
	}
	if removed > 0 {
		if err := fsys.SyncDir(parent); err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// makeImportTemp creates a new temporary directory for an Import into
// parent/base (and parent if it is missing), durably, and takes the lock of the store to be built
// in it.
func makeImportTemp(fsys vfs.FS, parent, base string) (string, vfs.Locker, error) {
	var tmp string
	for {
		var rnd [8]byte
		if _, err := rand.Read(rnd[:]); err != nil {
			return "", nil, err
		}
		tmp = filepath.Join(parent, "."+base+importTempInfix+hex.EncodeToString(rnd[:]))
		if ok, err := vfs.Exists(fsys, tmp); err != nil {
			return "", nil, err
		} else if !ok {
			break
		}
	}
	if err := vfs.MkdirAllDurable(fsys, tmp, 0o750); err != nil {
		_ = fsys.Remove(tmp)
		return "", nil, err
	}
	lk, err := vfs.LockStore(fsys, tmp)
	if err != nil {
		_ = removeFlatDir(fsys, tmp)
		return "", nil, err
	}
	return tmp, lk, nil
}

// removeFlatDir removes dir and the files in it (a store directory holds
// no subdirectory). Does not sync; the caller syncs dir's parent.
func removeFlatDir(fsys vfs.FS, dir string) error {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := fsys.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			return err
		}
	}
	return fsys.Remove(dir)
}

// importLockFS is fsys for a store whose lock the caller already holds: its
// Lock of that lock file returns a no-op Locker, so that Open runs under
// the lock taken first.
type importLockFS struct {
	vfs.FS
	lock string
}

func (h importLockFS) Lock(name string) (vfs.Locker, error) {
	if filepath.Clean(name) == h.lock {
		return importNopLocker{}, nil
	}
	return h.FS.Lock(name)
}

type importNopLocker struct{}

func (importNopLocker) Close() error { return nil }

func (db *DB) importFrom(r io.Reader) (*ExportReport, error) {
	rep := &ExportReport{}
	h := xxhash.New()
	br := bufio.NewReaderSize(r, 1<<20)
	// cr counts the bytes consumed, so that damage is reported at its
	// offset in the file: at names where the item being read began; a
	// read cut short by the end of the file is reported where it ended.
	cr := &countingReader{r: br}
	tr := io.TeeReader(cr, h)
	var at int64
	corrupt := func(format string, a ...any) error {
		return fmt.Errorf("%w: snapshot: offset %d: "+format, append([]any{ErrCorrupt, at}, a...)...)
	}
	cut := func(what string, err error) error {
		at = cr.n
		return corrupt("%s: %v (the file ends here)", what, err)
	}
	var hdr [8]byte
	if _, err := io.ReadFull(tr, hdr[:]); err != nil {
		return rep, cut("header", err)
	}
	if binary.LittleEndian.Uint32(hdr[:]) != exportMagic {
		return rep, corrupt("bad magic")
	}
	if v := binary.LittleEndian.Uint32(hdr[4:]); v != exportVersion {
		return rep, fmt.Errorf("%w: snapshot version %d, want %d", ErrVersionMismatch, v, exportVersion)
	}
	byteReader := readerByte{tr}
	field := func() ([]byte, error) {
		at = cr.n
		n, err := binary.ReadUvarint(byteReader)
		if err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return nil, cut("length", err)
			}
			return nil, corrupt("length: %v", err)
		}
		if n > maxExportField {
			return nil, corrupt("field of %d bytes", n)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(tr, b); err != nil {
			return nil, cut("field", err)
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
		lastKey []byte   // the current tree's last key
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
		at = cr.n
		if _, err := io.ReadFull(cr, kind[:]); err != nil {
			return rep, cut(fmt.Sprintf("truncated after %d records", records), err)
		}
		if kind[0] == exportEnd {
			break
		}
		h.Write(kind[:])
		switch kind[0] {
		case exportTree:
			rec := at
			name, err := field()
			if err != nil {
				return rep, err
			}
			if err := checkTreeName(name); err != nil {
				// As replay would refuse it (engine trees, unknown
				// namespaces, names over the limit).
				at = rec
				return rep, corrupt("%v", err)
			}
			if tree != nil && bytes.Compare(name, tree) <= 0 {
				// Export writes each tree once, in name order: a
				// repeated or out-of-order tree is no snapshot it wrote
				// (its keys would merge into the earlier tree's).
				at = rec
				return rep, corrupt("tree %q after tree %q: trees are in name order, each once", name, tree)
			}
			if treeNew {
				empty = append(empty, tree)
			}
			tree, treeNew, lastKey = name, true, nil
			rep.Trees++
		case exportKV:
			if tree == nil {
				return rep, corrupt("key before any tree")
			}
			rec := at
			k, err := field()
			if err != nil {
				return rep, err
			}
			v, err := field()
			if err != nil {
				return rep, err
			}
			if len(k) == 0 || len(k) > MaxKeySize || len(v) > MaxValueSize {
				at = rec
				return rep, corrupt("key of %d bytes, value of %d bytes", len(k), len(v))
			}
			if lastKey != nil && bytes.Compare(k, lastKey) <= 0 {
				// Export writes a tree's keys in key order, each once: a
				// repeated key would be imported with its last value
				// only, silently.
				at = rec
				return rep, corrupt("tree %q: key %q after key %q: keys are in order, each once", tree, k, lastKey)
			}
			lastKey = k
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
	at = cr.n
	if _, err := io.ReadFull(cr, trailer[:]); err != nil {
		return rep, cut("trailer", err)
	}
	if n := binary.LittleEndian.Uint64(trailer[:]); n != records {
		return rep, corrupt("trailer counts %d records, read %d", n, records)
	}
	if sum := binary.LittleEndian.Uint64(trailer[8:]); sum != h.Sum64() {
		return rep, corrupt("checksum mismatch: the trailer's checksum does not match the bytes before it")
	}
	at = cr.n
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

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// readerByte adapts an io.Reader to io.ByteReader one byte at a time.
type readerByte struct{ r io.Reader }

func (b readerByte) ReadByte() (byte, error) {
	var c [1]byte
	_, err := io.ReadFull(b.r, c[:])
	return c[0], err
}
