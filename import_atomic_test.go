package kdb

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// importSnapshot returns a snapshot of a small store with values kept
// inline and in the journal, and the store's content.
func importSnapshot(t *testing.T) ([]byte, map[string]string) {
	t.Helper()
	mem := vfs.NewMem()
	db, err := Open("/src", &Options{FS: mem, SegmentSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 60; i++ {
		if err := db.Put("x", []byte(fmt.Sprintf("k%03d", i)), bytes.Repeat([]byte{byte(i)}, i*30)); err != nil {
			t.Fatal(err)
		}
	}
	var snap bytes.Buffer
	if _, err := db.Export(&snap); err != nil {
		t.Fatal(err)
	}
	want := rawDump(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return snap.Bytes(), want
}

// tempDirsOf lists the names in parent that look like Import's temporary
// directories for base.
func tempDirsOf(t *testing.T, fsys vfs.FS, parent, base string) []string {
	t.Helper()
	names, err := fsys.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, "."+base+importTempInfix) {
			out = append(out, n)
		}
	}
	return out
}

// requireImported opens dir on fsys and requires want's content.
func requireImported(t *testing.T, fsys vfs.FS, dir string, want map[string]string) {
	t.Helper()
	db, err := Open(dir, &Options{FS: fsys})
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	defer db.Close()
	got := rawDump(t, db)
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries, want %d", dir, len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: entry %q differs", dir, k)
		}
	}
}

// TestImport_InterruptedLeavesNoStore kills (a process crash: the
// namespace as it is) an Import before each of its writes, and crashes it
// (a power loss: the durable namespace and synced bytes only) before every
// third: dir is never a
// partial store, only absent or the whole import; and an Import run again
// on that state succeeds, removing the leftover temporary directory.
func TestImport_InterruptedLeavesNoStore(t *testing.T) {
	snap, want := importSnapshot(t)
	mem := vfs.NewMem()
	type point struct {
		n    int
		fsys *vfs.MemFS
	}
	var points []point
	n := 0
	fsys := vfs.Intercept(mem, func(e vfs.Event) error {
		if e.Op.Mutating() {
			n++
			points = append(points, point{n, mem.ProcessCrashClone()})
			if n%3 == 0 {
				points = append(points, point{n, mem.CrashClone(vfs.CrashOptions{KeepUnsynced: 0.5, Seed: int64(n)})})
			}
		}
		return nil
	})
	if _, err := Import("/top/dst", bytes.NewReader(snap), &Options{FS: fsys}); err != nil {
		t.Fatal(err)
	}
	// Once Import returned, the store is durable: a power loss now finds
	// it in place, whole.
	after := mem.CrashClone(vfs.CrashOptions{Seed: 1})
	if exists, err := vfs.Exists(after, "/top/dst"); err != nil || !exists {
		t.Fatalf("a power loss after Import returned: /top/dst exists %v (%v), want the store", exists, err)
	}
	requireImported(t, after.Clone(), "/top/dst", want)
	points = append(points, point{n + 1, after})
	if len(points) < 20 {
		t.Fatalf("only %d points", len(points))
	}
	complete := 0
	for i, p := range points {
		exists, err := vfs.Exists(p.fsys, "/top/dst")
		if err != nil {
			t.Fatal(err)
		}
		if exists {
			// Only the rename creates dst: it is the whole store.
			requireImported(t, p.fsys, "/top/dst", want)
			complete++
			continue
		}
		if _, err := Open("/top/dst", &Options{FS: p.fsys, ReadOnly: true}); err == nil {
			t.Fatalf("point %d (write %d): a read-only open of the absent dst succeeded", i, p.n)
		}
		rep, err := Import("/top/dst", bytes.NewReader(snap), &Options{FS: p.fsys})
		if err != nil {
			t.Fatalf("point %d (write %d): import again: %v", i, p.n, err)
		}
		if left := tempDirsOf(t, p.fsys, "/top", "dst"); len(left) != 0 {
			t.Fatalf("point %d (write %d): %v left after the second import (removed %d)", i, p.n, left, rep.StaleRemoved)
		}
		requireImported(t, p.fsys, "/top/dst", want)
	}
	if complete == 0 {
		t.Fatalf("no point after the rename")
	}
	t.Logf("%d points, %d with the store in place", len(points), complete)
}

// TestImport_TargetRules: an existing empty directory is replaced by the
// import; a non-empty one, a file, a store and an empty name are refused
// and left as they were; a failed import leaves neither dir nor a
// temporary directory; a temporary directory in use (its lock held) is not
// taken for a stale one.
func TestImport_TargetRules(t *testing.T) {
	snap, want := importSnapshot(t)
	mem := vfs.NewMem()
	o := &Options{FS: mem}
	if err := mem.MkdirAll("/p/empty", 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := Import("/p/empty", bytes.NewReader(snap), o); err != nil {
		t.Fatalf("import into an empty directory: %v", err)
	}
	requireImported(t, mem, "/p/empty", want)
	if _, err := Import("/p/empty", bytes.NewReader(snap), o); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("import over a store: %v", err)
	}
	if err := mem.MkdirAll("/p/full", 0o750); err != nil {
		t.Fatal(err)
	}
	if err := vfs.WriteFileAtomic(mem, "/p/full/note", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Import("/p/full", bytes.NewReader(snap), o); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("import into a non-empty directory: %v", err)
	}
	if names, _ := mem.ReadDir("/p/full"); len(names) != 1 {
		t.Fatalf("the non-empty directory changed: %v", names)
	}
	if _, err := Import("/p/full/note", bytes.NewReader(snap), o); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("import onto a file: %v", err)
	}
	if _, err := Import("", bytes.NewReader(snap), o); !errors.Is(err, ErrInvalid) {
		t.Fatalf("import into \"\": %v", err)
	}
	if _, err := Import("/p/bad", bytes.NewReader(snap[:len(snap)/2]), o); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("import of half a snapshot: %v", err)
	}
	if ok, _ := vfs.Exists(mem, "/p/bad"); ok {
		t.Fatalf("a failed import created its directory")
	}
	if left := tempDirsOf(t, mem, "/p", "bad"); len(left) != 0 {
		t.Fatalf("a failed import left %v", left)
	}

	// A temporary directory whose lock is held belongs to a running
	// import: it stays; one whose lock is free is removed and counted.
	busy := "/p/.busy" + importTempInfix + "0123456789abcdef"
	stale := "/p/.busy" + importTempInfix + "fedcba9876543210"
	for _, d := range []string{busy, stale} {
		if err := mem.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := vfs.WriteFileAtomic(mem, d+"/db.data", []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	lk, err := mem.Lock(busy + "/lock")
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	rep, err := Import("/p/busy", bytes.NewReader(snap), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.StaleRemoved != 1 {
		t.Errorf("StaleRemoved %d, want 1", rep.StaleRemoved)
	}
	if ok, _ := vfs.Exists(mem, busy+"/db.data"); !ok {
		t.Errorf("the temporary directory in use was removed")
	}
	if ok, _ := vfs.Exists(mem, stale); ok {
		t.Errorf("the stale temporary directory is still there")
	}
	requireImported(t, mem, "/p/busy", want)
}

// TestImport_RefusesDirInsideAStore: a dir whose parent, or any directory
// above it, holds a store (db.data) is refused with ErrInvalid naming that
// store, before anything is created: Import into store/sub put a second
// store (and its temporary directory and claim lock) inside the first
// one's directory, which holds only its own files; store/a/b created a
// too. Through a symbolic link to the store (on the OS file system) too.
func TestImport_RefusesDirInsideAStore(t *testing.T) {
	snap, _ := importSnapshot(t)
	check := func(t *testing.T, fsys vfs.FS, store, dir string) {
		t.Helper()
		before, err := fsys.ReadDir(store)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Import(dir, bytes.NewReader(snap), &Options{FS: fsys})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "inside the store") {
			t.Errorf("Import(%s) under the store %s: %v; want ErrInvalid: inside the store", dir, store, err)
		} else if !strings.Contains(err.Error(), store) {
			t.Errorf("Import(%s): %v; want the store %s named", dir, err, store)
		}
		after, err := fsys.ReadDir(store)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(before, ",") != strings.Join(after, ",") {
			t.Errorf("Import(%s): the store's directory changed: %v, was %v", dir, after, before)
		}
	}
	t.Run("mem", func(t *testing.T) {
		mem := vfs.NewMem()
		db, err := Open("/s", &Options{FS: mem})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if err := mem.MkdirAll("/s/empty", 0o750); err != nil {
			t.Fatal(err)
		}
		for _, dir := range []string{"/s/sub", "/s/a/b", "/s/empty/x", "/s/x/../y"} {
			check(t, mem, "/s", dir)
		}
		// A sibling is not inside: /s2 beside /s.
		if _, err := Import("/s2", bytes.NewReader(snap), &Options{FS: mem}); err != nil {
			t.Errorf("Import(/s2) beside the store /s: %v", err)
		}
	})
	t.Run("os", func(t *testing.T) {
		top := t.TempDir()
		store := filepath.Join(top, "store")
		db, err := Open(store, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(top, "link")
		if err := os.Symlink(store, link); err != nil {
			t.Fatal(err)
		}
		for _, dir := range []string{filepath.Join(store, "sub"), filepath.Join(link, "sub"), filepath.Join(link, "a", "b")} {
			check(t, vfs.OS, store, dir)
		}
		// The link itself stands for the store's directory: not empty.
		if _, err := Import(link, bytes.NewReader(snap), nil); !errors.Is(err, ErrNotEmpty) {
			t.Errorf("Import(link to the store): %v, want ErrNotEmpty", err)
		}
	})
}

// TestImport_FailureLeavesNothingBesideDir: an Import that fails (a
// damaged or empty snapshot, a dir that is not empty) leaves no temporary
// directory beside dir, and at most its empty claim lock file
// (".<name>.import.lock": kept so that no two Imports ever build for one
// dir at once; the next Import reuses it). Import with ReadOnly options is
// ErrInvalid and creates nothing, not even the parent.
func TestImport_FailureLeavesNothingBesideDir(t *testing.T) {
	snap, _ := importSnapshot(t)
	for _, fsName := range []string{"mem", "os"} {
		var fsys vfs.FS = vfs.NewMem()
		parent := "/p"
		if fsName == "os" {
			fsys, parent = vfs.OS, filepath.Join(t.TempDir(), "p")
		}
		o := &Options{FS: fsys}
		if _, err := Import(filepath.Join(parent, "ro"), bytes.NewReader(snap), &Options{FS: fsys, ReadOnly: true}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%s: import with ReadOnly options: %v, want ErrInvalid", fsName, err)
		}
		if ok, err := vfs.Exists(fsys, parent); err != nil || ok {
			t.Fatalf("%s: import with ReadOnly options created %s (%v)", fsName, parent, err)
		}
		if err := vfs.MkdirAllDurable(fsys, filepath.Join(parent, "full"), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := vfs.WriteFileAtomic(fsys, filepath.Join(parent, "full", "note"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			snap []byte
			want error
		}{
			{"trunc", snap[:len(snap)/2], ErrCorrupt},
			{"flipped", flip(snap, len(snap)/3), ErrCorrupt},
			{"empty", nil, ErrCorrupt},
			{"full", snap, ErrNotEmpty},
		} {
			if _, err := Import(filepath.Join(parent, c.name), bytes.NewReader(c.snap), o); !errors.Is(err, c.want) {
				t.Fatalf("%s: import into %s: %v, want %v", fsName, c.name, err, c.want)
			}
			names, err := fsys.ReadDir(parent)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if n != "full" && !strings.HasSuffix(n, ".import.lock") {
					t.Fatalf("%s: after the failed import into %s, %s holds %v; want full and claim lock files only", fsName, c.name, parent, names)
				}
				if strings.HasSuffix(n, ".import.lock") {
					if b, err := vfs.ReadFile(fsys, filepath.Join(parent, n)); err != nil || len(b) != 0 {
						t.Fatalf("%s: claim %s: %d bytes, %v; want empty", fsName, n, len(b), err)
					}
				}
			}
		}
	}
}
