package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"sync"
	"testing"
)

// dump returns every file of m (visible namespace) by path, and every
// directory as "<dir>".
func dump(t *testing.T, m *MemFS) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(dir string)
	walk = func(dir string) {
		names, err := m.ReadDir(dir)
		if err != nil {
			t.Fatalf("ReadDir %s: %v", dir, err)
		}
		for _, n := range names {
			p := path.Join(dir, n)
			if _, isDir, err := m.Stat(p); err != nil {
				t.Fatal(err)
			} else if isDir {
				out[p] = "<dir>"
				walk(p)
			} else {
				out[p] = string(readAll(t, m, p))
			}
		}
	}
	walk("/")
	return out
}

// create writes data to a new file name and syncs it (not its directory).
func create(t *testing.T, m FS, name string, data []byte) File {
	t.Helper()
	f := mustOpen(t, m, name, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
	mustWrite(t, f, data, 0)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return f
}

func mustSyncDir(t *testing.T, m FS, dir string) {
	t.Helper()
	if err := m.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
}

func exists(t *testing.T, m FS, name string) bool {
	t.Helper()
	ok, err := Exists(m, name)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestMemFS_SyncedFileWithoutSyncDirVanishes(t *testing.T) {
	m := NewMem()
	mustClose(t, create(t, m, "a", []byte("data")))
	if img := m.CrashClone(CrashOptions{KeepUnsynced: 1}); exists(t, img, "a") {
		t.Fatal("a file whose directory was never synced survived a crash")
	}
	mustSyncDir(t, m, ".")
	img := m.CrashClone(CrashOptions{})
	if got := readAll(t, img, "a"); string(got) != "data" {
		t.Fatalf("after SyncDir: a = %q, want data", got)
	}
}

func TestMemFS_DirectoryNotSyncedVanishes(t *testing.T) {
	m := NewMem()
	if err := m.MkdirAll("db/sub", 0o700); err != nil {
		t.Fatal(err)
	}
	mustClose(t, create(t, m, "db/sub/f", []byte("x")))
	mustSyncDir(t, m, "db/sub")
	mustSyncDir(t, m, "db")
	// "db" itself is not durable in the root yet: the whole subtree goes.
	if img := m.CrashClone(CrashOptions{KeepUnsynced: 1}); exists(t, img, "db") {
		t.Fatal("db survived without SyncDir of its parent")
	}
	mustSyncDir(t, m, "/")
	if got := readAll(t, m.CrashClone(CrashOptions{}), "db/sub/f"); string(got) != "x" {
		t.Fatalf("db/sub/f = %q", got)
	}
}

func TestMemFS_RenameWithoutSyncDirReverts(t *testing.T) {
	m := NewMem()
	mustClose(t, create(t, m, "old", []byte("v1")))
	mustSyncDir(t, m, ".")
	if err := m.Rename("old", "new"); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"/old": "v1"}
	if got := dump(t, m.CrashClone(CrashOptions{KeepUnsynced: 1})); !maps.Equal(got, want) {
		t.Fatalf("crash image after unsynced rename = %v, want %v", got, want)
	}
	mustSyncDir(t, m, ".")
	want = map[string]string{"/new": "v1"}
	if got := dump(t, m.CrashClone(CrashOptions{})); !maps.Equal(got, want) {
		t.Fatalf("crash image after synced rename = %v, want %v", got, want)
	}
}

func TestMemFS_RemoveWithoutSyncDirReverts(t *testing.T) {
	m := NewMem()
	f := create(t, m, "a", []byte("v1"))
	mustSyncDir(t, m, ".")
	if err := m.Remove("a"); err != nil {
		t.Fatal(err)
	}
	// The open handle still reaches the inode; its synced writes are durable
	// for the name that survives the crash.
	mustWrite(t, f, []byte("v2"), 0)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, f)
	if got := dump(t, m.CrashClone(CrashOptions{})); got["/a"] != "v2" {
		t.Fatalf("crash image after unsynced remove = %v, want a=v2", got)
	}
	mustSyncDir(t, m, ".")
	if got := dump(t, m.CrashClone(CrashOptions{KeepUnsynced: 1})); len(got) != 0 {
		t.Fatalf("crash image after synced remove = %v, want empty", got)
	}
}

func TestMemFS_AtomicReplace(t *testing.T) {
	m := NewMem()
	if err := WriteFileAtomic(m, "db.free", []byte("gen1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(m, "db.free", []byte("gen2"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"/db.free": "gen2"}
	if got := dump(t, m.CrashClone(CrashOptions{})); !maps.Equal(got, want) {
		t.Fatalf("crash image = %v, want %v", got, want)
	}
}

// page returns 4096 bytes of b.
func page(b byte) []byte { return bytes.Repeat([]byte{b}, 4096) }

// sectors classifies each 512-byte sector of got as 'o' (all old), 'n' (all
// new) or 'g' (anything else).
func sectors(got, old, new []byte) string {
	var s []byte
	for i := 0; i < len(got); i += SectorSize {
		switch g := got[i : i+SectorSize]; {
		case bytes.Equal(g, old[i:i+SectorSize]):
			s = append(s, 'o')
		case bytes.Equal(g, new[i:i+SectorSize]):
			s = append(s, 'n')
		default:
			s = append(s, 'g')
		}
	}
	return string(s)
}

// unsyncedRewrite returns a MemFS where "p" durably holds page(1) and an
// unsynced WriteAt has rewritten it with page(2).
func unsyncedRewrite(t *testing.T) *MemFS {
	m := NewMem()
	f := create(t, m, "p", page(1))
	mustSyncDir(t, m, ".")
	mustWrite(t, f, page(2), 0)
	mustClose(t, f)
	return m
}

func TestMemFS_TornPageRewrite(t *testing.T) {
	m := unsyncedRewrite(t)
	patterns := map[string]int{}
	for seed := range int64(64) {
		got := readAll(t, m.CrashClone(CrashOptions{KeepUnsynced: 0.5, Seed: seed}), "p")
		s := sectors(got, page(1), page(2))
		if bytes.ContainsRune([]byte(s), 'g') {
			t.Fatalf("seed %d: a sector is neither old nor new: %s", seed, s)
		}
		patterns[s]++
		// Same seed, same image.
		again := readAll(t, m.CrashClone(CrashOptions{KeepUnsynced: 0.5, Seed: seed}), "p")
		if !bytes.Equal(got, again) {
			t.Fatalf("seed %d: CrashClone is not deterministic", seed)
		}
	}
	torn := 0
	for s := range patterns {
		if s != "oooooooo" && s != "nnnnnnnn" {
			torn++
		}
	}
	if torn == 0 || len(patterns) < 10 {
		t.Fatalf("64 seeds gave %d patterns, %d torn: %v", len(patterns), torn, patterns)
	}
	if got := readAll(t, m, "p"); !bytes.Equal(got, page(2)) {
		t.Fatal("CrashClone changed the original")
	}
	// The extremes are exact.
	if got := readAll(t, m.CrashClone(CrashOptions{}), "p"); !bytes.Equal(got, page(1)) {
		t.Fatal("KeepUnsynced=0 kept unsynced bytes")
	}
	if got := readAll(t, m.CrashClone(CrashOptions{KeepUnsynced: 1}), "p"); !bytes.Equal(got, page(2)) {
		t.Fatal("KeepUnsynced=1 dropped unsynced bytes")
	}
}

func TestMemFS_SectorsAreFileAligned(t *testing.T) {
	m := NewMem()
	f := create(t, m, "p", page(1))
	mustSyncDir(t, m, ".")
	// An unaligned write over [100, 1100) touches sectors 0, 1 and 2; each
	// part is kept or dropped whole.
	mustWrite(t, f, bytes.Repeat([]byte{2}, 1000), 100)
	for seed := range int64(32) {
		got := readAll(t, m.CrashClone(CrashOptions{KeepUnsynced: 0.5, Seed: seed}), "p")
		for _, r := range [][2]int{{100, 512}, {512, 1024}, {1024, 1100}} {
			part := got[r[0]:r[1]]
			if !bytes.Equal(part, bytes.Repeat([]byte{1}, len(part))) && !bytes.Equal(part, bytes.Repeat([]byte{2}, len(part))) {
				t.Fatalf("seed %d: bytes [%d,%d) are mixed", seed, r[0], r[1])
			}
		}
		if !bytes.Equal(got[:100], page(1)[:100]) || !bytes.Equal(got[1100:], page(1)[1100:]) {
			t.Fatalf("seed %d: bytes outside the write changed", seed)
		}
	}
}

func TestMemFS_GarbageSectors(t *testing.T) {
	m := unsyncedRewrite(t)
	got := readAll(t, m.CrashClone(CrashOptions{GarbageUnsynced: 1, Seed: 1}), "p")
	if s := sectors(got, page(1), page(2)); s != "gggggggg" {
		t.Fatalf("GarbageUnsynced=1: sectors %s, want all garbage", s)
	}
	counts := map[byte]int{}
	for seed := range int64(32) {
		got := readAll(t, m.CrashClone(CrashOptions{KeepUnsynced: 0.4, GarbageUnsynced: 0.3, Seed: seed}), "p")
		for _, c := range []byte(sectors(got, page(1), page(2))) {
			counts[c]++
		}
	}
	if counts['o'] == 0 || counts['n'] == 0 || counts['g'] == 0 {
		t.Fatalf("keep 0.4 garbage 0.3 over 32 seeds: sector kinds %v, want all three", counts)
	}
}

func TestMemFS_SyncedDataAlwaysSurvives(t *testing.T) {
	for seed := range int64(20) {
		rng := rand.New(rand.NewPCG(uint64(seed), 1))
		m := NewMem()
		synced := make([]byte, 10000)
		for i := range synced {
			synced[i] = byte(rng.Uint32())
		}
		f := create(t, m, "a", synced)
		mustSyncDir(t, m, ".")
		// Unsynced appends and writes to another file; none touch a[:10000].
		for range 20 {
			mustWrite(t, f, make([]byte, rng.IntN(3000)+1), 10000+rng.Int64N(5000))
		}
		g := create(t, m, "b", []byte("b"))
		mustWrite(t, g, make([]byte, 5000), 0)
		img := m.CrashClone(CrashOptions{KeepUnsynced: 0.3, GarbageUnsynced: 0.5, Seed: seed})
		got := readAll(t, img, "a")
		if len(got) < len(synced) || !bytes.Equal(got[:len(synced)], synced) {
			t.Fatalf("seed %d: synced bytes of a changed in the crash image", seed)
		}
		mustClose(t, f)
		mustClose(t, g)
	}
}

func TestMemFS_SizeChangesWhole(t *testing.T) {
	m := NewMem()
	f := create(t, m, "a", page(1))
	mustSyncDir(t, m, ".")
	if err := f.Truncate(100); err != nil {
		t.Fatal(err)
	}
	sizes := map[int]bool{}
	for seed := range int64(32) {
		sizes[len(readAll(t, m.CrashClone(CrashOptions{KeepUnsynced: 0.5, Seed: seed}), "a"))] = true
	}
	if len(sizes) != 2 || !sizes[100] || !sizes[4096] {
		t.Fatalf("sizes after an unsynced truncate: %v, want exactly {100, 4096}", sizes)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Allocate(0, 8192); err != nil {
		t.Fatal(err)
	}
	if got := len(readAll(t, m.CrashClone(CrashOptions{}), "a")); got != 100 {
		t.Fatalf("unsynced Allocate kept with KeepUnsynced=0: size %d", got)
	}
	if got := len(readAll(t, m.CrashClone(CrashOptions{KeepUnsynced: 1}), "a")); got != 8192 {
		t.Fatalf("unsynced Allocate dropped with KeepUnsynced=1: size %d", got)
	}
	mustClose(t, f)
}

func TestMemFS_OTruncUnsynced(t *testing.T) {
	m := NewMem()
	mustClose(t, create(t, m, "a", []byte("old content")))
	mustSyncDir(t, m, ".")
	f := mustOpen(t, m, "a", os.O_RDWR|os.O_TRUNC)
	mustWrite(t, f, []byte("new"), 0)
	mustClose(t, f)
	if got := readAll(t, m, "a"); string(got) != "new" {
		t.Fatalf("view = %q", got)
	}
	if got := readAll(t, m.CrashClone(CrashOptions{}), "a"); string(got) != "old content" {
		t.Fatalf("crash image = %q, want the old content", got)
	}
}

func TestMemFS_DropUnsynced(t *testing.T) {
	m := NewMem()
	f := create(t, m, "a", []byte("synced"))
	mustSyncDir(t, m, ".")
	mustWrite(t, f, []byte("UNSYNCED-AND-LONGER"), 0)
	m.DropUnsynced("a")
	if got := readAll(t, m, "a"); string(got) != "synced" {
		t.Fatalf("after DropUnsynced view = %q", got)
	}
	if got := readAll(t, m.CrashClone(CrashOptions{KeepUnsynced: 1}), "a"); string(got) != "synced" {
		t.Fatalf("after DropUnsynced crash image = %q", got)
	}
	m.DropUnsynced("missing") // no-op
	mustClose(t, f)
}

func TestMemFS_CloneIsExact(t *testing.T) {
	m := NewMem()
	if err := m.MkdirAll("d", 0o700); err != nil {
		t.Fatal(err)
	}
	mustSyncDir(t, m, ".")
	f := create(t, m, "d/a", page(1))
	mustSyncDir(t, m, "d")
	mustWrite(t, f, page(2), 2048)
	mustClose(t, create(t, m, "d/b", []byte("b")))
	c := m.Clone()
	if got, want := dump(t, c), dump(t, m); !maps.Equal(got, want) {
		t.Fatal("Clone view differs")
	}
	o := CrashOptions{KeepUnsynced: 0.5, GarbageUnsynced: 0.2, Seed: 7}
	if got, want := dump(t, c.CrashClone(o)), dump(t, m.CrashClone(o)); !maps.Equal(got, want) {
		t.Fatalf("Clone().CrashClone differs: %v vs %v", got, want)
	}
	// Independent: writing to the clone leaves m alone.
	g := mustOpen(t, c, "d/b", os.O_RDWR)
	mustWrite(t, g, []byte("changed"), 0)
	mustClose(t, g)
	if got := readAll(t, m, "d/b"); string(got) != "b" {
		t.Fatalf("writing to the clone changed m: %q", got)
	}
	mustClose(t, f)
}

func TestMemFS_Locks(t *testing.T) {
	m := NewMem()
	l, err := m.Lock("lock")
	if err != nil {
		t.Fatal(err)
	}
	mustSyncDir(t, m, ".")
	img := m.CrashClone(CrashOptions{})
	l2, err := img.Lock("lock")
	if err != nil {
		t.Fatalf("a crash image holds a lock: %v", err)
	}
	mustClose(t, l2)
	if _, err := m.Lock("./lock"); !errors.Is(err, ErrLocked) {
		t.Fatalf("same path, other spelling: %v, want ErrLocked", err)
	}
	mustClose(t, l)
}

func TestMemFS_Mmap(t *testing.T) {
	m := NewMem()
	f := create(t, m, "a", page(1))
	if _, err := f.Mmap(4096); !errors.Is(err, ErrMmapUnsupported) {
		t.Fatalf("Mmap: %v, want ErrMmapUnsupported", err)
	}
	mustClose(t, f)
}

func TestMemFS_Errors(t *testing.T) {
	m := NewMem()
	mustClose(t, create(t, m, "file", nil))
	if err := m.MkdirAll("d", 0o700); err != nil {
		t.Fatal(err)
	}
	ro := mustOpen(t, m, "file", os.O_RDONLY)
	defer mustClose(t, ro)
	tests := []struct {
		name string
		err  error
	}{
		{"open dir", func() error { _, err := m.OpenFile("d", os.O_RDWR, 0); return err }()},
		{"file as dir", func() error { _, err := m.OpenFile("file/x", os.O_RDWR|os.O_CREATE, 0o600); return err }()},
		{"mkdir over file", m.MkdirAll("file/x", 0o700)},
		{"write read-only", func() error { _, err := ro.WriteAt([]byte("x"), 0); return err }()},
		{"negative offset", func() error { _, err := ro.ReadAt(make([]byte, 1), -1); return err }()},
		{"too large", func() error {
			f := mustOpen(t, m, "big", os.O_RDWR|os.O_CREATE)
			defer mustClose(t, f)
			_, err := f.WriteAt([]byte("x"), MemMaxFileSize)
			return err
		}()},
		{"escape root", func() error { _, _, err := m.Stat("../x"); return err }()},
		{"rename dir into itself", m.Rename("d", "d/e")},
	}
	for _, tt := range tests {
		if tt.err == nil {
			t.Errorf("%s: no error", tt.name)
		}
		var pe *fs.PathError
		var le *os.LinkError
		if !errors.As(tt.err, &pe) && !errors.As(tt.err, &le) {
			t.Errorf("%s: %v is not a *fs.PathError or *os.LinkError", tt.name, tt.err)
		}
	}
}

// runModel drives one MemFS file with the operations encoded in prog and
// checks it against a model that copies the whole file at each sync: after
// each step the view must equal the model's view, the KeepUnsynced=0 image
// the model's synced bytes, and the KeepUnsynced=1 image the view.
//
// Each step takes 5 bytes: kind, then two little-endian uint16 (a, b).
func runModel(t *testing.T, prog []byte) {
	m := NewMem()
	f := create(t, m, "a", nil)
	defer mustClose(t, f)
	mustSyncDir(t, m, ".")
	var view, synced []byte
	grow := func(end int64) {
		if end > int64(len(view)) {
			view = append(view, make([]byte, end-int64(len(view)))...)
		}
	}
	for i := 0; i+5 <= len(prog); i += 5 {
		kind := prog[i] % 10
		a := int64(prog[i+1]) | int64(prog[i+2])<<8
		b := int64(prog[i+3]) | int64(prog[i+4])<<8
		switch {
		case kind < 5: // write b%3000+1 bytes at a (may leave a hole)
			p := make([]byte, b%3000+1)
			for j := range p {
				p[j] = byte(i + j + 1)
			}
			if kind == 0 { // append right after the end: exercises coalescing
				a = int64(len(view))
			}
			mustWrite(t, f, p, a)
			grow(a + int64(len(p)))
			copy(view[a:], p)
		case kind < 6:
			if err := f.Truncate(a); err != nil {
				t.Fatal(err)
			}
			if a < int64(len(view)) {
				view = view[:a:a]
			}
			grow(a)
		case kind < 7:
			if err := f.Allocate(a, b+1); err != nil {
				t.Fatal(err)
			}
			grow(a + b + 1)
		default:
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			synced = bytes.Clone(view)
		}
		step := i / 5
		if got := readAll(t, m, "a"); !bytes.Equal(got, view) {
			t.Fatalf("step %d: view differs from the model", step)
		}
		if got := readAll(t, m.CrashClone(CrashOptions{}), "a"); !bytes.Equal(got, synced) {
			t.Fatalf("step %d: KeepUnsynced=0 image differs from the synced model (len %d vs %d)", step, len(got), len(synced))
		}
		if got := readAll(t, m.CrashClone(CrashOptions{KeepUnsynced: 1}), "a"); !bytes.Equal(got, view) {
			t.Fatalf("step %d: KeepUnsynced=1 image differs from the view", step)
		}
		if got := readAll(t, m.Clone().CrashClone(CrashOptions{}), "a"); !bytes.Equal(got, synced) {
			t.Fatalf("step %d: Clone lost the synced state", step)
		}
	}
}

func TestMemFS_SyncMatchesModel(t *testing.T) {
	steps, seeds := 400, uint64(3)
	switch {
	case testing.Short():
		steps = 100
	case os.Getenv("KDB_LONG") != "":
		steps, seeds = 2000, 50
	}
	for seed := range seeds {
		prog := make([]byte, 5*steps)
		rng := rand.New(rand.NewPCG(seed, 42))
		for i := range prog {
			prog[i] = byte(rng.Uint32())
		}
		for i := 1; i < len(prog); i += 5 {
			prog[i+1] %= 64 // offsets and sizes below 16 KiB
			prog[i+3] %= 64
		}
		runModel(t, prog)
	}
}

func FuzzMemFS_Model(f *testing.F) {
	f.Add([]byte{1, 0, 0, 10, 0, 9, 0, 0, 0, 0, 5, 3, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 200, 1, 0, 0, 0, 200, 1, 7, 0, 0, 0, 0, 2, 100, 0, 50, 0})
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 5*200 {
			prog = prog[:5*200]
		}
		for i := 1; i+4 < len(prog); i += 5 {
			prog[i+1] %= 64 // keep files below 16 KiB + 3000
			prog[i+3] %= 64
		}
		runModel(t, prog)
	})
}

func TestMemFS_Concurrent(t *testing.T) {
	m := NewMem()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("f%d", g)
			f, err := m.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			buf := make([]byte, 512)
			for i := range 200 {
				if _, err := f.WriteAt(bytes.Repeat([]byte{byte(i)}, 512), int64(i%16)*512); err != nil {
					t.Error(err)
					return
				}
				if _, err := f.ReadAt(buf, 0); err != nil {
					t.Error(err)
					return
				}
				if i%10 == 0 {
					if err := f.Sync(); err != nil {
						t.Error(err)
					}
					if err := m.SyncDir("."); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 50 {
			_ = m.CrashClone(CrashOptions{KeepUnsynced: 0.5, Seed: int64(i)})
			_ = m.Clone()
			if _, err := m.ReadDir("."); err != nil {
				t.Error(err)
			}
		}
	}()
	wg.Wait()
	for g := range 4 {
		if got := readAll(t, m, fmt.Sprintf("f%d", g)); len(got) != 16*512 {
			t.Fatalf("f%d: len %d", g, len(got))
		}
	}
}

func TestMemFS_CloneOwnsPendingWrites(t *testing.T) {
	m := NewMem()
	f := create(t, m, "a", nil)
	mustSyncDir(t, m, ".")
	mustWrite(t, f, []byte("abc"), 0) // pending
	c := m.Clone()
	g := mustOpen(t, c, "a", os.O_RDWR)
	// Both append contiguously: each coalesces into its own pending op.
	mustWrite(t, f, []byte("MMM"), 3)
	mustWrite(t, g, []byte("CCC"), 3)
	mustClose(t, f)
	mustClose(t, g)
	keep := CrashOptions{KeepUnsynced: 1}
	if got := readAll(t, m.CrashClone(keep), "a"); string(got) != "abcMMM" {
		t.Fatalf("m image = %q", got)
	}
	if got := readAll(t, c.CrashClone(keep), "a"); string(got) != "abcCCC" {
		t.Fatalf("clone image = %q", got)
	}
}

func TestMemFS_SequentialAppendsTearBySector(t *testing.T) {
	m := NewMem()
	f := create(t, m, "log", nil)
	mustSyncDir(t, m, ".")
	var want []byte
	for i := range 40 { // 40 records of 100 bytes, unsynced
		rec := bytes.Repeat([]byte{byte(i + 1)}, 100)
		mustWrite(t, f, rec, int64(len(want)))
		want = append(want, rec...)
	}
	mustClose(t, f)
	for seed := range int64(16) {
		got := readAll(t, m.CrashClone(CrashOptions{KeepUnsynced: 0.5, Seed: seed}), "log")
		if len(got) > len(want) {
			t.Fatalf("seed %d: image longer than written", seed)
		}
		for s := 0; s < len(got); s += SectorSize {
			e := min(s+SectorSize, len(got))
			part := got[s:e]
			if !bytes.Equal(part, want[s:e]) && !bytes.Equal(part, make([]byte, e-s)) {
				t.Fatalf("seed %d: sector at %d is neither the written bytes nor a hole", seed, s)
			}
		}
	}
}

func BenchmarkMemFS_WriteSync(b *testing.B) {
	m := NewMem()
	f, err := m.OpenFile("log", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	// Steady state: the 64 MiB file exists and is synced; the loop rewrites
	// it page by page.
	const size = 64 << 20
	if _, err := f.WriteAt(make([]byte, size), 0); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	rec := make([]byte, 4096)
	b.SetBytes(int64(len(rec)))
	var off int64
	for b.Loop() {
		if _, err := f.WriteAt(rec, off); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		off = (off + int64(len(rec))) % size
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/write+sync")
}

func BenchmarkMemFS_CrashClone(b *testing.B) {
	const size = 16 << 20
	m := NewMem()
	f, err := m.OpenFile("data", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, size/2), 0); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := m.SyncDir("."); err != nil {
		b.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, size/2), size/2); err != nil { // unsynced half
		b.Fatal(err)
	}
	b.SetBytes(size)
	for b.Loop() {
		_ = m.CrashClone(CrashOptions{KeepUnsynced: 0.5, Seed: 1})
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/clone-16MiB")
}

func TestMemFS_AllocateNeverShrinksImage(t *testing.T) {
	m := NewMem()
	f := create(t, m, "a", page(1))
	mustSyncDir(t, m, ".")
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if err := f.Allocate(0, 100); err != nil {
		t.Fatal(err)
	}
	mustClose(t, f)
	// Truncate and Allocate are each kept or dropped whole: the image is
	// page(1) (Allocate alone cannot shrink it), empty, or 100 zeros.
	seen := map[int]bool{}
	for seed := range int64(32) {
		got := readAll(t, m.CrashClone(CrashOptions{KeepUnsynced: 0.5, Seed: seed}), "a")
		seen[len(got)] = true
		switch {
		case bytes.Equal(got, page(1)), len(got) == 0, bytes.Equal(got, make([]byte, 100)):
		default:
			t.Fatalf("seed %d: image of %d bytes starting %v", seed, len(got), got[:min(len(got), 8)])
		}
	}
	if len(seen) != 3 {
		t.Fatalf("sizes seen %v, want all three outcomes over 32 seeds", seen)
	}
}

func TestMemFS_Perm(t *testing.T) {
	m := NewMem()
	mustClose(t, mustOpen(t, m, "a", os.O_RDWR|os.O_CREATE)) // 0600
	if err := WriteFileAtomic(m, "b", []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock("lock")
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	mustSyncDir(t, m, ".")
	for _, fsys := range []*MemFS{m, m.Clone(), m.CrashClone(CrashOptions{})} {
		for name, want := range map[string]os.FileMode{"a": 0o600, "b": 0o640, "lock": 0o600} {
			if got, err := fsys.Perm(name); err != nil || got != want {
				t.Errorf("Perm(%s) = %v, %v; want %v", name, got, err, want)
			}
		}
	}
	if _, err := m.Perm("missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Perm(missing) = %v", err)
	}
}

func TestMemFS_OSyncWritesAreDurable(t *testing.T) {
	m := NewMem()
	for _, c := range []struct {
		name string
		flag int
	}{{"sync", os.O_SYNC}, {"plain", 0}} {
		f := mustOpen(t, m, c.name, os.O_RDWR|os.O_CREATE|c.flag)
		mustWrite(t, f, []byte("data"), 0)
		mustClose(t, f)
	}
	mustSyncDir(t, m, ".")
	img := m.CrashClone(CrashOptions{})
	if got := readAll(t, img, "sync"); string(got) != "data" {
		t.Fatalf("O_SYNC write lost: %q", got)
	}
	if got := readAll(t, img, "plain"); len(got) != 0 {
		t.Fatalf("plain unsynced write kept with KeepUnsynced=0: %q", got)
	}
}
