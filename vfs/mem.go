package vfs

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
)

// SectorSize is the unit in which MemFS.CrashClone keeps, drops or garbles
// unsynced writes: a crash tears a write at 512-byte boundaries (aligned to
// the file offset, not to the write).
const SectorSize = 512

// MemMaxFileSize bounds the size of a MemFS file. A WriteAt, Truncate or
// Allocate that would make a file larger fails with EFBIG, so that a bad
// offset cannot make a test allocate without bound.
const MemMaxFileSize = 4 << 30

// MemFS is an in-memory FS that can produce a power-loss image of itself at
// any moment (CrashClone). See docs/DESIGN.md, "The file-system seam" for the crash model.
//
// Paths are cleaned with path/filepath; the FS has a single root, so "x",
// "./x" and "/x" name the same file. The root directory always exists and
// always survives a crash.
//
// Invariants:
//   - For every file inode: applying mu-guarded pending ops, in order, to
//     synced gives data. Reads see data (like the page cache); a crash image
//     starts from synced.
//   - For every directory inode: children is the visible namespace, durable
//     the namespace as of the last SyncDir of that directory. Inodes are
//     shared between both maps, so a synced file is durable whichever
//     durable name reaches it.
//   - A file handle keeps its inode after Remove or Rename (unix semantics).
//
// A MemFS is safe for concurrent use.
type MemFS struct {
	mu struct {
		sync.RWMutex
		root  *memNode
		locks map[string]bool // held locks by cleaned path
	}
}

// memNode is an inode. All fields are guarded by the owning MemFS.mu.
type memNode struct {
	dir  bool
	perm os.FileMode // as passed at creation

	// Directory.
	children map[string]*memNode // visible entries
	durable  map[string]*memNode // entries as of the last SyncDir

	// File.
	data         []byte  // what reads see
	synced       []byte  // what survives a crash for sure
	pending      []memOp // unsynced changes, oldest first
	pendingBytes int64   // bytes held by pending writes
}

type memOpKind uint8

const (
	memWrite   memOpKind = iota + 1 // data written at off
	memSetSize                      // size set to size (Truncate)
	memGrow                         // size raised to at least size (Allocate)
)

// memOp is one unsynced change to a file.
type memOp struct {
	kind memOpKind
	off  int64
	data []byte
	size int64
}

var (
	_ FS   = (*MemFS)(nil)
	_ File = (*memFile)(nil)
)

// NewMem returns an empty in-memory FS whose root directory exists.
func NewMem() *MemFS {
	m := &MemFS{}
	m.mu.root = newDirNode()
	m.mu.locks = make(map[string]bool)
	return m
}

// NewCrashableMem is NewMem. Every MemFS can crash; the name reads well in
// crash tests.
func NewCrashableMem() *MemFS { return NewMem() }

func newDirNode() *memNode {
	return &memNode{dir: true, perm: 0o700, children: map[string]*memNode{}, durable: map[string]*memNode{}}
}

// splitPath cleans name and returns its components below the root (none for
// the root itself).
func splitPath(name string) ([]string, error) {
	p := filepath.ToSlash(filepath.Clean(name))
	p = strings.TrimLeft(p, "/")
	if p == "" || p == "." {
		return nil, nil
	}
	parts := strings.Split(p, "/")
	if parts[0] == ".." {
		return nil, syscall.EINVAL // a relative path escaping the root
	}
	return parts, nil
}

func pathErr(op, name string, err error) error {
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// lookupLocked resolves parts in the visible namespace.
//
// The caller must hold m.mu (read or write).
func (m *MemFS) lookupLocked(parts []string) (*memNode, error) {
	n := m.mu.root
	for _, p := range parts {
		if !n.dir {
			return nil, syscall.ENOTDIR
		}
		c, ok := n.children[p]
		if !ok {
			return nil, syscall.ENOENT
		}
		n = c
	}
	return n, nil
}

// parentLocked resolves the directory holding the last component of parts
// and returns it with that component's name. parts must not be empty.
//
// The caller must hold m.mu (read or write).
func (m *MemFS) parentLocked(parts []string) (*memNode, string, error) {
	dir, err := m.lookupLocked(parts[:len(parts)-1])
	if err != nil {
		return nil, "", err
	}
	if !dir.dir {
		return nil, "", syscall.ENOTDIR
	}
	return dir, parts[len(parts)-1], nil
}

// OpenFile opens or creates name. O_CREATE adds a visible directory entry,
// durable only after SyncDir of the parent. O_TRUNC is an unsynced truncate.
// O_SYNC (and O_DSYNC) make every WriteAt durable before it returns.
// Directories cannot be opened.
func (m *MemFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	parts, err := splitPath(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(parts) == 0 {
		return nil, pathErr("open", name, syscall.EISDIR)
	}
	dir, base, err := m.parentLocked(parts)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	n, ok := dir.children[base]
	switch {
	case ok && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, pathErr("open", name, syscall.EEXIST)
	case ok && n.dir:
		return nil, pathErr("open", name, syscall.EISDIR)
	case !ok && flag&os.O_CREATE == 0:
		return nil, pathErr("open", name, syscall.ENOENT)
	case !ok:
		n = &memNode{perm: perm.Perm()}
		dir.children[base] = n
	}
	f := &memFile{fs: m, n: n, name: name, flag: flag}
	if flag&os.O_TRUNC != 0 && f.writable() && len(n.data) > 0 {
		n.setSize(memOp{kind: memSetSize, size: 0})
	}
	return f, nil
}

// Remove removes a file or an empty directory from the visible namespace.
// Open handles keep the inode.
func (m *MemFS) Remove(name string) error {
	parts, err := splitPath(name)
	if err != nil {
		return pathErr("remove", name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(parts) == 0 {
		return pathErr("remove", name, syscall.EBUSY)
	}
	dir, base, err := m.parentLocked(parts)
	if err != nil {
		return pathErr("remove", name, err)
	}
	n, ok := dir.children[base]
	if !ok {
		return pathErr("remove", name, syscall.ENOENT)
	}
	if n.dir && len(n.children) > 0 {
		return pathErr("remove", name, syscall.ENOTEMPTY)
	}
	delete(dir.children, base)
	return nil
}

// Rename moves oldname to newname in the visible namespace, replacing a file
// (or an empty directory, if oldname is a directory) at newname. The crash
// image keeps the old names until SyncDir of the parents.
func (m *MemFS) Rename(oldname, newname string) error {
	op, err := splitPath(oldname)
	var np []string
	if err == nil {
		np, err = splitPath(newname)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	lerr := func(e error) error { return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: e} }
	if len(op) == 0 || len(np) == 0 {
		return lerr(syscall.EBUSY)
	}
	odir, obase, err := m.parentLocked(op)
	if err != nil {
		return lerr(err)
	}
	n, ok := odir.children[obase]
	if !ok {
		return lerr(syscall.ENOENT)
	}
	ndir, nbase, err := m.parentLocked(np)
	if err != nil {
		return lerr(err)
	}
	if odir == ndir && obase == nbase {
		return nil
	}
	if n.dir && len(np) > len(op) && strings.Join(np[:len(op)], "/") == strings.Join(op, "/") {
		return lerr(syscall.EINVAL) // into its own subtree
	}
	if old, ok := ndir.children[nbase]; ok {
		switch {
		case n.dir && !old.dir:
			return lerr(syscall.ENOTDIR)
		case !n.dir && old.dir:
			return lerr(syscall.EISDIR)
		case old.dir && len(old.children) > 0:
			return lerr(syscall.ENOTEMPTY)
		}
	}
	delete(odir.children, obase)
	ndir.children[nbase] = n
	return nil
}

// MkdirAll creates dir and any missing parents in the visible namespace.
// Each new entry is durable only after SyncDir of its parent.
func (m *MemFS) MkdirAll(dir string, perm os.FileMode) error {
	parts, err := splitPath(dir)
	if err != nil {
		return pathErr("mkdir", dir, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.mu.root
	for _, p := range parts {
		c, ok := n.children[p]
		if !ok {
			c = newDirNode()
			c.perm = perm.Perm()
			n.children[p] = c
		}
		if !c.dir {
			return pathErr("mkdir", dir, syscall.ENOTDIR)
		}
		n = c
	}
	return nil
}

// ReadDir returns the sorted names in the visible namespace of dir.
func (m *MemFS) ReadDir(dir string) ([]string, error) {
	parts, err := splitPath(dir)
	if err != nil {
		return nil, pathErr("readdir", dir, err)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	n, err := m.lookupLocked(parts)
	if err != nil {
		return nil, pathErr("readdir", dir, err)
	}
	if !n.dir {
		return nil, pathErr("readdir", dir, syscall.ENOTDIR)
	}
	return sortedNames(n.children), nil
}

func sortedNames(m map[string]*memNode) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Stat returns the visible size of name and whether it is a directory.
func (m *MemFS) Stat(name string) (int64, bool, error) {
	parts, err := splitPath(name)
	if err != nil {
		return 0, false, pathErr("stat", name, err)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	n, err := m.lookupLocked(parts)
	if err != nil {
		return 0, false, pathErr("stat", name, err)
	}
	if n.dir {
		return 0, true, nil
	}
	return int64(len(n.data)), false, nil
}

// Perm returns the permission bits name was created with (MemFS applies no
// umask and checks no permissions; tests use it to check what callers ask).
func (m *MemFS) Perm(name string) (os.FileMode, error) {
	parts, err := splitPath(name)
	if err != nil {
		return 0, pathErr("stat", name, err)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	n, err := m.lookupLocked(parts)
	if err != nil {
		return 0, pathErr("stat", name, err)
	}
	return n.perm, nil
}

// SyncDir makes every entry change in dir (creates, renames, removes,
// mkdirs) durable. It does not sync file data or subdirectories.
func (m *MemFS) SyncDir(dir string) error {
	parts, err := splitPath(dir)
	if err != nil {
		return pathErr("syncdir", dir, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookupLocked(parts)
	if err != nil {
		return pathErr("syncdir", dir, err)
	}
	if !n.dir {
		return pathErr("syncdir", dir, syscall.ENOTDIR)
	}
	n.durable = make(map[string]*memNode, len(n.children))
	for k, v := range n.children {
		n.durable[k] = v
	}
	return nil
}

// Lock takes the in-memory lock on name, creating the file (perm 0600) if
// missing. A second Lock of the same path fails with ErrLocked until the
// first is closed. Locks are per MemFS; a crash image holds none.
func (m *MemFS) Lock(name string) (Locker, error) {
	parts, err := splitPath(name)
	if err != nil {
		return nil, pathErr("lock", name, err)
	}
	key := strings.Join(parts, "/")
	f, err := m.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.locks[key] {
		return nil, fmt.Errorf("%w: %s: held by this process (a MemFS lives in one)", ErrLocked, name)
	}
	m.mu.locks[key] = true
	return &memLock{fs: m, key: key}, nil
}

type memLock struct {
	fs   *MemFS
	key  string
	once sync.Once
}

func (l *memLock) Close() error {
	l.once.Do(func() {
		l.fs.mu.Lock()
		delete(l.fs.mu.locks, l.key)
		l.fs.mu.Unlock()
	})
	return nil
}

// DropUnsynced discards the pending (unsynced) writes, truncates and
// allocations of the file name, so that reads and crash images both show
// its last synced content. errfs calls it when it fails a Sync on a MemFS,
// modelling Linux, where a failed fsync may drop dirty pages: the data is
// gone and a later fsync succeeds without writing it. A missing name is a
// no-op.
func (m *MemFS) DropUnsynced(name string) {
	parts, err := splitPath(name)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookupLocked(parts)
	if err != nil || n.dir {
		return
	}
	n.dropUnsynced()
}

// dropUnsynced reverts the file to its synced content.
//
// The caller must hold the owning MemFS.mu.
func (n *memNode) dropUnsynced() {
	n.data = append(n.data[:0], n.synced...)
	n.pending = nil
	n.pendingBytes = 0
}

// setSize records a size change (op.kind memSetSize or memGrow) and applies
// it to data.
//
// The caller must hold the owning MemFS.mu.
func (n *memNode) setSize(op memOp) {
	n.data = applySize(n.data, op)
	n.pending = append(n.pending, op)
}

// write records an unsynced write and applies it to data.
//
// The caller must hold the owning MemFS.mu.
//
// A write that starts where the previous pending write ended is coalesced
// into it (as the page cache would hold both in the same pages), so that
// sequential appends cost one pending op; a crash then decides once per
// sector of the merged range.
func (n *memNode) write(p []byte, off int64) {
	if k := len(n.pending) - 1; k >= 0 && n.pending[k].kind == memWrite &&
		n.pending[k].off+int64(len(n.pending[k].data)) == off {
		n.pending[k].data = append(n.pending[k].data, p...)
	} else {
		c := append([]byte(nil), p...)
		n.pending = append(n.pending, memOp{kind: memWrite, off: off, data: c})
	}
	n.pendingBytes += int64(len(p))
	n.data = writeAt(n.data, p, off)
}

// sync makes the pending changes durable.
//
// The caller must hold the owning MemFS.mu.
func (n *memNode) sync() {
	// Applying the ops costs pendingBytes; copying costs the file size.
	if n.pendingBytes >= int64(len(n.data)) {
		n.synced = append(n.synced[:0], n.data...)
	} else {
		for _, op := range n.pending {
			if op.kind == memWrite {
				n.synced = writeAt(n.synced, op.data, op.off)
			} else {
				n.synced = applySize(n.synced, op)
			}
		}
	}
	n.pending = nil
	n.pendingBytes = 0
}

// resize returns b with length size; bytes added read as zero.
func resize(b []byte, size int64) []byte {
	old := int64(len(b))
	if size <= old {
		return b[:size]
	}
	if size <= int64(cap(b)) {
		b = b[:size]
		clear(b[old:])
		return b
	}
	// Double the capacity: files grow by many small appends.
	nb := make([]byte, size, max(size, 2*int64(cap(b))))
	copy(nb, b)
	return nb
}

func applySize(b []byte, op memOp) []byte {
	if op.kind == memGrow && op.size <= int64(len(b)) {
		return b
	}
	return resize(b, op.size)
}

func writeAt(b, p []byte, off int64) []byte {
	if end := off + int64(len(p)); end > int64(len(b)) {
		b = resize(b, end)
	}
	copy(b[off:], p)
	return b
}

// memFile is an open MemFS file. Its fields after construction are guarded
// by fs.mu.
type memFile struct {
	fs     *MemFS
	n      *memNode
	name   string
	flag   int
	closed bool
}

func (f *memFile) readable() bool { return f.flag&(os.O_WRONLY|os.O_RDWR) != os.O_WRONLY }
func (f *memFile) writable() bool { return f.flag&(os.O_WRONLY|os.O_RDWR) != 0 }

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.RLock()
	defer f.fs.mu.RUnlock()
	switch {
	case f.closed:
		return 0, pathErr("read", f.name, os.ErrClosed)
	case !f.readable():
		return 0, pathErr("read", f.name, syscall.EBADF)
	case off < 0:
		return 0, pathErr("read", f.name, syscall.EINVAL)
	}
	if off >= int64(len(f.n.data)) {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// checkWriteLocked validates a change that would make the file end at end.
//
// The caller must hold f.fs.mu.
func (f *memFile) checkWriteLocked(op string, off, end int64) error {
	switch {
	case f.closed:
		return pathErr(op, f.name, os.ErrClosed)
	case !f.writable():
		return pathErr(op, f.name, syscall.EBADF)
	case off < 0 || end < off:
		return pathErr(op, f.name, syscall.EINVAL)
	case end > MemMaxFileSize:
		return pathErr(op, f.name, syscall.EFBIG)
	}
	return nil
}

// WriteAt writes p at off. Not durable until Sync (unless opened O_SYNC).
func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkWriteLocked("write", off, off+int64(len(p))); err != nil {
		return 0, err
	}
	if f.flag&os.O_APPEND != 0 {
		return 0, pathErr("write", f.name, syscall.EINVAL) // as os.File.WriteAt
	}
	if len(p) == 0 {
		return 0, nil
	}
	f.n.write(p, off)
	if f.flag&os.O_SYNC != 0 { // on Linux this also matches O_DSYNC (a subset of its bits)
		f.n.sync()
	}
	return len(p), nil
}

// Sync makes the file's data and size durable. It never fails on a MemFS
// (errfs injects failures).
func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("sync", f.name, os.ErrClosed)
	}
	f.n.sync()
	return nil
}

// DropUnsynced is MemFS.DropUnsynced for this handle's inode, whatever its
// current name.
func (f *memFile) DropUnsynced() {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.n.dropUnsynced()
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.checkWriteLocked("truncate", size, size); err != nil {
		return err
	}
	f.n.setSize(memOp{kind: memSetSize, size: size})
	return nil
}

func (f *memFile) Allocate(off, n int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if n <= 0 {
		return pathErr("allocate", f.name, syscall.EINVAL)
	}
	if err := f.checkWriteLocked("allocate", off, off+n); err != nil {
		return err
	}
	if off+n > int64(len(f.n.data)) {
		f.n.setSize(memOp{kind: memGrow, size: off + n})
	}
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.fs.mu.RLock()
	defer f.fs.mu.RUnlock()
	if f.closed {
		return 0, pathErr("stat", f.name, os.ErrClosed)
	}
	return int64(len(f.n.data)), nil
}

// Mmap is not supported by MemFS: callers fall back to ReadAt.
func (f *memFile) Mmap(size int64) ([]byte, error) {
	return nil, pathErr("mmap", f.name, ErrMmapUnsupported)
}

func (f *memFile) Munmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return pathErr("munmap", f.name, ErrMmapUnsupported)
}

func (f *memFile) Name() string { return f.name }

// Close closes the handle. It does not sync.
func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("close", f.name, os.ErrClosed)
	}
	f.closed = true
	return nil
}

// CrashOptions says what a simulated power loss keeps of unsynced data.
// The zero value drops every unsynced change.
type CrashOptions struct {
	// KeepUnsynced is the probability (0..1) that each 512-byte sector of
	// an unsynced write reaches the crash image, and that each unsynced size
	// change (Truncate, Allocate, O_TRUNC) does, as a whole.
	KeepUnsynced float64
	// GarbageUnsynced is the probability (0..1) that each sector of an
	// unsynced write comes back as random bytes instead. Only the bytes the
	// write covered are garbled; bytes it did not touch keep their value.
	GarbageUnsynced float64
	// Seed makes the image deterministic.
	Seed int64

	// Each sector draws one number r in [0,1): kept if r < KeepUnsynced,
	// garbled if r < KeepUnsynced+GarbageUnsynced, else dropped. So values
	// outside 0..1, or a sum above 1, saturate rather than fail.
}

// CrashClone returns the image a power loss would leave now: the durable
// namespace (as of the last SyncDir of each directory), each file's synced
// content, and each unsynced change kept, garbled or dropped at random per
// CrashOptions. Everything in the image is durable and no lock is held. m is
// unchanged and stays usable. The result depends only on m's state and o.
func (m *MemFS) CrashClone(o CrashOptions) *MemFS {
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x6b6462637261736b)) // "kdbcrask"
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := NewMem()
	seen := map[*memNode]*memNode{}
	var walk func(src, dst *memNode)
	walk = func(src, dst *memNode) {
		for _, name := range sortedNames(src.durable) {
			c := src.durable[name]
			nc, ok := seen[c]
			if !ok {
				if c.dir {
					nc = newDirNode()
					nc.perm = c.perm
					seen[c] = nc
					walk(c, nc)
				} else {
					img := c.crashImage(rng, o)
					nc = &memNode{perm: c.perm, data: img, synced: append([]byte(nil), img...)}
					seen[c] = nc
				}
			}
			dst.children[name] = nc
			dst.durable[name] = nc
		}
	}
	walk(m.mu.root, out.mu.root)
	return out
}

// crashImage returns the file's content after a simulated power loss.
//
// The caller must hold the owning MemFS.mu.
func (n *memNode) crashImage(rng *rand.Rand, o CrashOptions) []byte {
	img := append([]byte(nil), n.synced...)
	for _, op := range n.pending {
		if op.kind != memWrite {
			if rng.Float64() < o.KeepUnsynced {
				img = applySize(img, op)
			}
			continue
		}
		end := op.off + int64(len(op.data))
		for lo := op.off; lo < end; {
			hi := min((lo/SectorSize+1)*SectorSize, end)
			r := rng.Float64()
			switch {
			case r < o.KeepUnsynced:
				img = writeAt(img, op.data[lo-op.off:hi-op.off], lo)
			case r < o.KeepUnsynced+o.GarbageUnsynced:
				g := make([]byte, hi-lo)
				for i := range g {
					g[i] = byte(rng.Uint32())
				}
				img = writeAt(img, g, lo)
			}
			lo = hi
		}
	}
	return img
}

// ProcessCrashClone returns the state a process crash (SIGKILL, panic,
// os.Exit) leaves now: the kernel keeps everything the process wrote, so
// the next process sees every write, truncate and namespace change, synced
// or not, while what a later power loss keeps is still only what was
// synced. It is Clone under the name crash tests read: a test that crashes
// the process, recovers in a second process and then cuts the power (the
// clone's CrashClone) checks that recovery made durable what it trusted.
func (m *MemFS) ProcessCrashClone() *MemFS { return m.Clone() }

// Clone returns an exact copy of m: the same visible and durable
// namespaces, file contents, synced contents and pending changes, so that
// m.Clone().CrashClone(o) equals m.CrashClone(o). Locks are not copied.
func (m *MemFS) Clone() *MemFS {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := NewMem()
	seen := map[*memNode]*memNode{}
	var clone func(n *memNode) *memNode
	clone = func(n *memNode) *memNode {
		if c, ok := seen[n]; ok {
			return c
		}
		if n.dir {
			c := newDirNode()
			c.perm = n.perm
			seen[n] = c
			for k, v := range n.children {
				c.children[k] = clone(v)
			}
			for k, v := range n.durable {
				c.durable[k] = clone(v)
			}
			return c
		}
		c := &memNode{
			perm:         n.perm,
			data:         append([]byte(nil), n.data...),
			synced:       append([]byte(nil), n.synced...),
			pending:      make([]memOp, len(n.pending)),
			pendingBytes: n.pendingBytes,
		}
		for i, op := range n.pending {
			op.data = bytes.Clone(op.data) // write() appends to the last op's data
			c.pending[i] = op
		}
		seen[n] = c
		return c
	}
	out.mu.root = clone(m.mu.root)
	return out
}
