package kdbtest

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// workload performs, on fsys, the mutating operations
//
//	1 write "one"  2 sync  3 syncdir  4 write "two"  5 sync
//
// and stops at the first error, which it returns.
func workload(fsys vfs.FS) error {
	f, err := fsys.OpenFile("a", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	steps := []func() error{
		func() error { _, err := f.WriteAt([]byte("one"), 0); return err },
		f.Sync,
		func() error { return fsys.SyncDir(".") },
		func() error { _, err := f.WriteAt([]byte("two"), 0); return err },
		f.Sync,
	}
	for _, s := range steps {
		if err := s(); err != nil {
			_ = f.Close()
			return err
		}
	}
	return f.Close()
}

func TestCrasher_ImageAtKthMutation(t *testing.T) {
	tests := []struct {
		k    int
		want string // content of "a" in the image; "" = absent
	}{
		{1, ""},     // nothing written
		{2, ""},     // written, unsynced, and the name is not durable
		{3, ""},     // synced data but the directory sync itself crashed
		{4, "one"},  // name and first write durable
		{5, "one"},  // second write unsynced, dropped
		{6, "two"},  // no crash: image at the end
		{0, "two"},  // k < 1 never crashes
		{99, "two"}, // beyond the workload
	}
	for _, tt := range tests {
		c := CrashAt(vfs.NewMem(), tt.k, vfs.CrashOptions{})
		err := workload(c.FS())
		wantCrash := tt.k >= 1 && tt.k <= 5
		if c.Crashed() != wantCrash || errors.Is(err, ErrCrashed) != wantCrash {
			t.Fatalf("k=%d: Crashed() = %v, workload error %v; want crash %v", tt.k, c.Crashed(), err, wantCrash)
		}
		if wantCrash && c.Mutations() != tt.k {
			t.Fatalf("k=%d: Mutations() = %d", tt.k, c.Mutations())
		}
		if !wantCrash && c.Mutations() != 5 {
			t.Fatalf("k=%d: Mutations() = %d, want 5", tt.k, c.Mutations())
		}
		img := c.Image()
		got, err := vfs.ReadFile(img, "a")
		switch {
		case tt.want == "" && !errors.Is(err, os.ErrNotExist):
			t.Fatalf("k=%d: a = %q, %v; want absent", tt.k, got, err)
		case tt.want != "" && (err != nil || string(got) != tt.want):
			t.Fatalf("k=%d: a = %q, %v; want %q", tt.k, got, err, tt.want)
		}
	}
}

func TestCrasher_LaterOpsFail(t *testing.T) {
	mem := vfs.NewMem()
	c := CrashAt(mem, 2, vfs.CrashOptions{})
	fsys := c.FS()
	f, err := fsys.OpenFile("a", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); !errors.Is(err, ErrCrashed) {
		t.Fatalf("Sync (2nd mutation): %v, want ErrCrashed", err)
	}
	// Every later operation fails, mutating or not.
	later := map[string]error{
		"read":  func() error { _, err := f.ReadAt(make([]byte, 1), 0); return err }(),
		"write": func() error { _, err := f.WriteAt([]byte("y"), 0); return err }(),
		"open":  func() error { _, err := fsys.OpenFile("b", os.O_RDWR|os.O_CREATE, 0o600); return err }(),
		"stat":  func() error { _, _, err := fsys.Stat("a"); return err }(),
		"lock":  func() error { _, err := fsys.Lock("lock"); return err }(),
		"close": f.Close(),
	}
	for name, err := range later {
		if !errors.Is(err, ErrCrashed) {
			t.Errorf("%s after crash: %v, want ErrCrashed", name, err)
		}
	}
	if c.Mutations() != 2 {
		t.Fatalf("Mutations() = %d, want 2 (nothing counted after the crash)", c.Mutations())
	}
	// The failed operations did not reach mem.
	if ok, _ := vfs.Exists(mem, "b"); ok {
		t.Fatal("open after the crash created b")
	}
	if img := c.Image(); img != c.Image() {
		t.Fatal("Image() after a crash is not the one image")
	}
}

// TestCrasher_WriteFileAtomicSweep crashes vfs.WriteFileAtomic at every
// mutating operation, under several crash options: the name always holds
// the old content or the new one, never a mix, and the new one once the
// call has returned.
func TestCrasher_WriteFileAtomicSweep(t *testing.T) {
	old := []byte("old content")
	new := bytes.Repeat([]byte("new!"), 1000) // several sectors
	opts := []vfs.CrashOptions{
		{},
		{KeepUnsynced: 1},
		{KeepUnsynced: 0.5, Seed: 1},
		{KeepUnsynced: 0.3, GarbageUnsynced: 0.4, Seed: 2},
	}
	for _, o := range opts {
		sawOld, sawNew := false, false
		for k := 1; ; k++ {
			base := vfs.NewMem()
			if err := vfs.WriteFileAtomic(base, "db.free", old, 0o600); err != nil {
				t.Fatal(err)
			}
			c := CrashAt(base, k, o)
			err := vfs.WriteFileAtomic(c.FS(), "db.free", new, 0o600)
			got, rerr := vfs.ReadFile(c.Image(), "db.free")
			if rerr != nil {
				t.Fatalf("%+v k=%d: %v", o, k, rerr)
			}
			switch {
			case bytes.Equal(got, old) && c.Crashed():
				sawOld = true
			case bytes.Equal(got, new):
				sawNew = true
			default:
				t.Fatalf("%+v k=%d (crashed %v, err %v): db.free is %d bytes, neither old nor new", o, k, c.Crashed(), err, len(got))
			}
			if !c.Crashed() {
				if err != nil || !bytes.Equal(got, new) {
					t.Fatalf("%+v: finished without crash but err %v, new=%v", o, err, bytes.Equal(got, new))
				}
				break
			}
		}
		if !sawOld || !sawNew {
			t.Fatalf("%+v: sweep saw old %v new %v; want both", o, sawOld, sawNew)
		}
	}
}

func TestCrasher_ProcessCrashKeepsUnsynced(t *testing.T) {
	tests := []struct {
		k           int
		seen, power string // "a" as the next process sees it, and after a later power loss; "" = absent
	}{
		{1, "", ""},       // nothing written yet
		{2, "one", ""},    // written, not synced: the next process reads it, a power loss drops it
		{3, "one", ""},    // synced, but the name is not durable
		{4, "one", "one"}, // name and first write durable
		{5, "two", "one"}, // second write only in the OS cache
		{0, "two", "two"}, // no crash: the image at the end
	}
	for _, tt := range tests {
		c := ProcessCrashAt(vfs.NewMem(), tt.k)
		if err := workload(c.FS()); errors.Is(err, ErrCrashed) != (tt.k >= 1) {
			t.Fatalf("k=%d: workload error %v", tt.k, err)
		}
		img := c.Image()
		for _, s := range []struct {
			fs   *vfs.MemFS
			want string
			what string
		}{{img, tt.seen, "after the process crash"}, {img.CrashClone(vfs.CrashOptions{}), tt.power, "after a later power loss"}} {
			got, err := vfs.ReadFile(s.fs, "a")
			if tt.k == 1 && s.want == "" && err == nil && len(got) == 0 {
				continue // opened (created), nothing written
			}
			switch {
			case s.want == "" && !errors.Is(err, os.ErrNotExist):
				t.Fatalf("k=%d: %s: a = %q, %v; want absent", tt.k, s.what, got, err)
			case s.want != "" && (err != nil || string(got) != s.want):
				t.Fatalf("k=%d: %s: a = %q, %v; want %q", tt.k, s.what, got, err, s.want)
			}
		}
	}
}
