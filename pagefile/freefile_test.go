package pagefile

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
)

// buildForFreeTests runs three rounds on a new store and returns it with a
// copy of the db.free of the second checkpoint in /db/free.stale.
func buildForFreeTests(t *testing.T) *vfs.MemFS {
	t.Helper()
	mem := newBase(t, crashTestOpts, 30)
	f, _ := mustOpen(t, mem, crashTestOpts)
	if err := workload(f, 2, 3, nil); err != nil {
		t.Fatal(err)
	}
	if err := kdbtest.CopyFile(mem, "/db/db.free", "/db/free.stale"); err != nil {
		t.Fatal(err)
	}
	if err := workload(f, 1, 4, nil); err != nil {
		t.Fatal(err)
	}
	if len(f.FreeRanges()) < 2 {
		t.Fatalf("want a free list with several ranges, got %v", f.FreeRanges())
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return mem
}

// TestFile_FreeFileNeverTrustedWhenWrong damages or replaces db.free in
// every way the brief names and checks that Open takes the scan, says why,
// and finds exactly what the trusted path finds for the same state.
func TestFile_FreeFileNeverTrustedWhenWrong(t *testing.T) {
	mem := buildForFreeTests(t)
	f, rep, err := Open("/db", Options{FS: mem.Clone()})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FreeListPath != FreeListTrusted {
		t.Fatalf("undamaged store: %+v", rep)
	}
	trusted := captureState(t, f)
	meta := f.Meta()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// Another store with the same workload: same page count and free list,
	// other store ID (and checkpoint IDs).
	other := buildForFreeTests(t)
	freeSize, _, err := mem.Stat("/db/db.free")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		damage func(fsys *vfs.MemFS) error
		reason string
	}{
		{"missing", func(fsys *vfs.MemFS) error { return fsys.Remove("/db/db.free") }, "db.free missing"},
		{"empty", func(fsys *vfs.MemFS) error { return kdbtest.Truncate(fsys, "/db/db.free", 0) }, "truncated"},
		{"truncated in header", func(fsys *vfs.MemFS) error { return kdbtest.Truncate(fsys, "/db/db.free", 40) }, "truncated"},
		{"truncated in ranges", func(fsys *vfs.MemFS) error { return kdbtest.Truncate(fsys, "/db/db.free", freeSize-8) }, "do not fit"},
		{"bit flipped in a range", func(fsys *vfs.MemFS) error { return kdbtest.FlipBit(fsys, "/db/db.free", freeHeaderSize+3, 2) }, "checksum mismatch"},
		{"bit flipped in the ID", func(fsys *vfs.MemFS) error { return kdbtest.FlipBit(fsys, "/db/db.free", freeRand, 0) }, "checksum mismatch"},
		{"bit flipped in the checksum", func(fsys *vfs.MemFS) error { return kdbtest.FlipBit(fsys, "/db/db.free", freeChecksum+7, 7) }, "checksum mismatch"},
		{"stale checkpoint ID", func(fsys *vfs.MemFS) error {
			return fsys.Rename("/db/free.stale", "/db/db.free")
		}, "!= meta " + meta.ID.String()},
		{"copied from another store", func(fsys *vfs.MemFS) error {
			b, err := vfs.ReadFile(other, "/db/db.free")
			if err != nil {
				return err
			}
			return vfs.WriteFileAtomic(fsys, "/db/db.free", b, 0o600)
		}, "store ID"},
		{"other page count", func(fsys *vfs.MemFS) error {
			l := newFreeList()
			for _, r := range trusted.free {
				if err := l.freeRange(r); err != nil {
					return err
				}
			}
			b := encodeFreeFile(readStoreID(t, fsys), meta.ID, meta.PageCount+1, l)
			return vfs.WriteFileAtomic(fsys, "/db/db.free", b, 0o600)
		}, "page count"},
		{"range beyond the page count, checksum valid", func(fsys *vfs.MemFS) error {
			l := newFreeList()
			if err := l.freeRange(Range{PageID(meta.PageCount) - 1, 5}); err != nil {
				return err
			}
			b := encodeFreeFile(readStoreID(t, fsys), meta.ID, meta.PageCount, l)
			return vfs.WriteFileAtomic(fsys, "/db/db.free", b, 0o600)
		}, "beyond page count"},
		{"huge range count", func(fsys *vfs.MemFS) error {
			return patchFile(fsys, "/db/db.free", freeRangeCount, func(b []byte) { binary.LittleEndian.PutUint64(b, 1<<60) })
		}, "do not fit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fsys := mem.Clone()
			if err := tc.damage(fsys); err != nil {
				t.Fatal(err)
			}
			f, rep, err := Open("/db", Options{FS: fsys})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer f.Close()
			if rep.FreeListPath != FreeListScanned || !strings.Contains(rep.Reason, tc.reason) {
				t.Fatalf("path %q reason %q, want scanned because %q", rep.FreeListPath, rep.Reason, tc.reason)
			}
			if want := meta.PageCount - uint64(FirstDataPage); rep.PagesScanned != want {
				t.Fatalf("scanned %d pages, want %d", rep.PagesScanned, want)
			}
			if d := equalState(captureState(t, f), trusted, true); d != "" {
				t.Fatalf("scan result differs from the trusted one: %s", d)
			}
		})
	}
}

func readStoreID(t *testing.T, fsys vfs.FS) [16]byte {
	t.Helper()
	b, err := vfs.ReadFile(fsys, "/db/db.data")
	if err != nil {
		t.Fatal(err)
	}
	h, err := decodeHeader(b, "db.data")
	if err != nil {
		t.Fatal(err)
	}
	return h.storeID
}

// patchFile rewrites 8 bytes of name at off with fn.
func patchFile(fsys vfs.FS, name string, off int64, fn func(b []byte)) error {
	f, err := fsys.OpenFile(filepath.Clean(name), 2 /* O_RDWR */, 0o600)
	if err != nil {
		return err
	}
	b := make([]byte, 8)
	if _, err := f.ReadAt(b, off); err != nil {
		f.Close()
		return err
	}
	fn(b)
	if _, err := f.WriteAt(b, off); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func TestDecodeFreeFile_RoundTrip(t *testing.T) {
	l := newFreeList()
	for _, r := range []Range{{3, 2}, {7, 1}, {100, 50}} {
		if err := l.freeRange(r); err != nil {
			t.Fatal(err)
		}
	}
	id := CheckpointID{Seq: 9, Rand: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}}
	sid := [16]byte{9, 9}
	b := encodeFreeFile(sid, id, 200, l)
	ff, err := decodeFreeFile(b, "db.free")
	if err != nil {
		t.Fatal(err)
	}
	if ff.id != id || ff.storeID != sid || ff.pageCount != 200 || ff.freePages != 53 || len(ff.ranges) != 3 || ff.ranges[2] != (Range{100, 50}) {
		t.Fatalf("decoded %+v", ff)
	}
	if got := ff.toFreeList().ranges(); len(got) != 3 {
		t.Fatalf("free list %v", got)
	}
	b[freeVersion]++
	if _, err := decodeFreeFile(b, "db.free"); !errors.Is(err, ErrVersionMismatch) {
		t.Fatalf("version bumped: %v", err)
	}
}

// TestFile_FreeListNameIsADirectory: a directory at db.free or
// db.free.prev would fail the first checkpoint's rename, and one at
// db.free.tmp (where every checkpoint writes the new list) its create, and
// the handle with it, long after Open; a writable Open refuses it at once
// (ErrCorrupt naming it), a read-only one scans.
func TestFile_FreeListNameIsADirectory(t *testing.T) {
	for _, name := range []string{"/db/db.free", "/db/db.free.prev", "/db/db.free.tmp"} {
		mem := newBase(t, crashTestOpts, 5)
		_ = mem.Remove(name)
		if err := mem.MkdirAll(name, 0o700); err != nil {
			t.Fatal(err)
		}
		opts := crashTestOpts
		opts.FS = mem
		if _, _, err := Open("/db", opts); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name) {
			t.Fatalf("%s a directory: Open: %v, want ErrCorrupt naming it", name, err)
		}
		opts.ReadOnly = true
		f, _, err := Open("/db", opts)
		if err != nil {
			t.Fatalf("%s a directory: read-only Open: %v", name, err)
		}
		_ = f.Close()
	}
}

// TestFile_FreeListTempNotRegular: a FIFO or a symbolic link at
// db.free.tmp, where every checkpoint writes the new free list, is refused
// by a writable Open as ErrCorrupt naming it, as a directory there is: a
// checkpoint through the link wrote outside the store's directory (then
// renamed the link to db.free), and one at a FIFO failed the handle long
// after Open. A read-only Open writes nothing and does not mind it. A link
// planted there after Open fails the checkpoint and is never followed.
func TestFile_FreeListTempNotRegular(t *testing.T) {
	for _, kind := range []string{"FIFO", "symlink", "dangling symlink"} {
		dir := t.TempDir()
		outside := filepath.Join(t.TempDir(), "outside")
		if err := os.WriteFile(outside, []byte("not the store's"), 0o600); err != nil {
			t.Fatal(err)
		}
		gone := filepath.Join(t.TempDir(), "gone")
		opts := Options{FS: vfs.OS}
		f, _, err := Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "db.free.tmp")
		switch kind {
		case "FIFO":
			err = syscall.Mkfifo(tmp, 0o600)
		case "symlink":
			err = os.Symlink(outside, tmp)
		default:
			err = os.Symlink(gone, tmp)
		}
		if err != nil {
			t.Fatal(err)
		}
		if f, _, err := Open(dir, opts); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tmp+" is a") {
			if err == nil {
				_ = f.Close()
			}
			t.Errorf("db.free.tmp a %s: Open: %v, want ErrCorrupt naming it", kind, err)
		}
		ro := opts
		ro.ReadOnly = true
		if f, _, err := Open(dir, ro); err != nil {
			t.Errorf("db.free.tmp a %s: read-only Open: %v", kind, err)
		} else {
			_ = f.Close()
		}
		if kind != "FIFO" {
			// Planted after Open: the checkpoint fails, writing nothing
			// through it.
			if err := os.Remove(tmp); err != nil {
				t.Fatal(err)
			}
			f, _, err := Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(map[bool]string{true: outside, false: gone}[kind == "symlink"], tmp); err != nil {
				t.Fatal(err)
			}
			if err := f.Checkpoint(MetaUpdate{}); err == nil || !strings.Contains(err.Error(), tmp) {
				t.Errorf("db.free.tmp a %s planted after Open: Checkpoint: %v, want an error naming it", kind, err)
			}
			_ = f.Close()
		}
		if b, err := os.ReadFile(outside); err != nil || string(b) != "not the store's" {
			t.Errorf("db.free.tmp a %s: the file outside the store was written: %q, %v", kind, b, err)
		}
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("db.free.tmp a %s: a file was created outside the store: %v", kind, err)
		}
	}
}

// TestFile_RedoNameNotRegular: a directory or a FIFO at db.redo holds no
// redo batch: every Open, writable or read-only, refuses it as ErrCorrupt
// naming it (it was an I/O error, which kdbtool could only report, exit
// 3), never blocks on a FIFO.
func TestFile_RedoNameNotRegular(t *testing.T) {
	for _, kind := range []string{"directory", "FIFO"} {
		dir := t.TempDir()
		opts := Options{FS: vfs.OS}
		f, _, err := Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		redo := filepath.Join(dir, "db.redo")
		if err := os.Remove(redo); err != nil {
			t.Fatal(err)
		}
		if kind == "directory" {
			err = os.Mkdir(redo, 0o700)
		} else {
			err = syscall.Mkfifo(redo, 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, ro := range []bool{false, true} {
			opts.ReadOnly = ro
			if f, _, err := Open(dir, opts); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), redo) {
				if err == nil {
					_ = f.Close()
				}
				t.Fatalf("db.redo a %s, read-only %v: Open: %v, want ErrCorrupt naming it", kind, ro, err)
			}
		}
	}
}
