package errfs

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"slices"
	"syscall"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

func TestErrors_Unwrap(t *testing.T) {
	for _, c := range []struct {
		err   error
		errno syscall.Errno
	}{{ErrInjected, syscall.EIO}, {ErrNoSpace, syscall.ENOSPC}} {
		wrapped := &fs.PathError{Op: "write", Path: "x", Err: c.err}
		if !errors.Is(wrapped, c.errno) || !errors.Is(wrapped, c.err) {
			t.Errorf("%v: errors.Is(%v) = false", c.err, c.errno)
		}
	}
	if errors.Is(ErrInjected, ErrNoSpace) || errors.Is(ErrInjected, syscall.ENOSPC) {
		t.Error("ErrInjected matches ErrNoSpace")
	}
}

// script runs a fixed sequence of operations on f and returns the 1-based
// indexes of those that failed with ErrInjected. The sequence is
//
//	1 open  2 write  3 write  4 sync  5 write  6 sync  7 write  8 sync  9 close
func script(t *testing.T, f *FS) []int {
	t.Helper()
	var failed []int
	note := func(i int, err error) {
		if err != nil {
			if !errors.Is(err, ErrInjected) {
				t.Fatalf("op %d: unexpected error %v", i, err)
			}
			failed = append(failed, i)
		}
	}
	file, err := f.OpenFile("f", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	write := func(i int) { _, err := file.WriteAt([]byte{byte(i)}, int64(i)); note(i, err) }
	write(2)
	write(3)
	note(4, file.Sync())
	write(5)
	note(6, file.Sync())
	write(7)
	note(8, file.Sync())
	note(9, file.Close())
	return failed
}

func TestRule_Kinds(t *testing.T) {
	tests := []struct {
		name string
		rule Rule
		want []int
	}{
		{"none", nil, nil},
		{"OnNth write 2", OnNth(vfs.OpWrite, 2, ErrInjected), []int{3}},
		{"OnNth sync 2", OnNth(vfs.OpSync, 2, ErrInjected), []int{6}},
		{"OnNth sync 4 never", OnNth(vfs.OpSync, 4, ErrInjected), nil},
		{"FromNth sync 2", FromNth(vfs.OpSync, 2, ErrInjected), []int{6, 8}},
		{"FromNth write 1", FromNth(vfs.OpWrite, 1, ErrInjected), []int{2, 3, 5, 7}},
		{"OnIndex 5", OnIndex(5, ErrInjected), []int{5}},
		{"FromIndex 7", FromIndex(7, ErrInjected), []int{7, 8, 9}},
		{"OnPath match", OnPath("f", OnNth(vfs.OpSync, 1, ErrInjected)), []int{4}},
		{"OnPath no match", OnPath("other", FromIndex(2, ErrInjected)), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rules []Rule
			if tt.rule != nil {
				rules = append(rules, tt.rule)
			}
			f := Wrap(vfs.NewMem(), rules...)
			if got := script(t, f); !slices.Equal(got, tt.want) {
				t.Fatalf("failed ops = %v, want %v", got, tt.want)
			}
			if f.Count() != 9 || f.CountOp(vfs.OpSync) != 3 || f.CountOp(vfs.OpWrite) != 4 || f.CountOp(vfs.OpClose) != 1 {
				t.Fatalf("counts: %v", f)
			}
		})
	}
}

func TestRule_EveryRuleSeesEveryOp(t *testing.T) {
	// The first rule fails sync 1; the second must still count it, so it
	// fails sync 2 (op 6), not sync 3.
	f := Wrap(vfs.NewMem(), OnNth(vfs.OpSync, 1, ErrInjected), OnNth(vfs.OpSync, 2, ErrInjected))
	if got, want := script(t, f), []int{4, 6}; !slices.Equal(got, want) {
		t.Fatalf("failed ops = %v, want %v", got, want)
	}
}

func TestFS_AddRule(t *testing.T) {
	f := Wrap(vfs.NewMem())
	file, err := f.OpenFile("f", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := file.Sync(); err != nil {
		t.Fatal(err)
	}
	f.AddRule(OnNth(vfs.OpSync, 1, ErrNoSpace)) // counts from now
	if err := file.Sync(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Sync after AddRule: %v, want ENOSPC", err)
	}
	if err := file.Sync(); err != nil {
		t.Fatalf("third Sync: %v", err)
	}
}

func TestFS_FailedWriteWritesNothing(t *testing.T) {
	mem := vfs.NewMem()
	f := Wrap(mem, OnNth(vfs.OpWrite, 2, ErrInjected))
	file, err := f.OpenFile("f", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.WriteAt([]byte("aaaa"), 0); err != nil {
		t.Fatal(err)
	}
	n, err := file.WriteAt([]byte("bbbbbbbb"), 2)
	if n != 0 || !errors.Is(err, ErrInjected) {
		t.Fatalf("failed WriteAt = %d, %v", n, err)
	}
	got, err := vfs.ReadFile(mem, "f")
	if err != nil || string(got) != "aaaa" {
		t.Fatalf("content = %q, %v; want aaaa", got, err)
	}
}

func TestFS_FailedOpenCreatesNothing(t *testing.T) {
	mem := vfs.NewMem()
	f := Wrap(mem, OnNth(vfs.OpOpen, 1, ErrInjected))
	if _, err := f.OpenFile("f", os.O_RDWR|os.O_CREATE, 0o600); !errors.Is(err, ErrInjected) {
		t.Fatalf("open: %v", err)
	}
	if ok, err := vfs.Exists(mem, "f"); ok || err != nil {
		t.Fatalf("file exists after a failed create: %v, %v", ok, err)
	}
}

func TestFS_FailedSyncDropsPending(t *testing.T) {
	mem := vfs.NewMem()
	f := Wrap(mem, OnNth(vfs.OpSync, 2, ErrInjected))
	file, err := f.OpenFile("f", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	old := bytes.Repeat([]byte("a"), 1000)
	if _, err := file.WriteAt(old, 0); err != nil {
		t.Fatal(err)
	}
	if err := file.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.SyncDir("."); err != nil {
		t.Fatal(err)
	}
	if _, err := file.WriteAt(bytes.Repeat([]byte("b"), 2000), 500); err != nil {
		t.Fatal(err)
	}
	if err := file.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("second Sync: %v, want EIO", err)
	}
	check := func(what string, fsys vfs.FS) {
		t.Helper()
		got, err := vfs.ReadFile(fsys, "f")
		if err != nil || !bytes.Equal(got, old) {
			t.Fatalf("%s: len %d, %v; want the synced 1000 bytes of 'a'", what, len(got), err)
		}
	}
	check("view after failed sync", mem)
	check("crash image keeping everything", mem.CrashClone(vfs.CrashOptions{KeepUnsynced: 1}))
	// As on Linux, a retried Sync "succeeds" and the data is still gone.
	if err := file.Sync(); err != nil {
		t.Fatalf("third Sync: %v", err)
	}
	check("after retried sync", mem)
	if err := file.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestFS_FailedCloseStillCloses(t *testing.T) {
	mem := vfs.NewMem()
	f := Wrap(mem, OnNth(vfs.OpClose, 1, ErrInjected))
	file, err := f.OpenFile("f", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := file.Close(); !errors.Is(err, ErrInjected) {
		t.Fatalf("Close: %v", err)
	}
	if _, err := file.WriteAt([]byte("x"), 0); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("WriteAt after failed Close: %v, want ErrClosed", err)
	}
}

func TestFS_FSOps(t *testing.T) {
	tests := []struct {
		op  vfs.Op
		run func(f *FS) error
	}{
		{vfs.OpMkdir, func(f *FS) error { return f.MkdirAll("d", 0o700) }},
		{vfs.OpSyncDir, func(f *FS) error { return f.SyncDir(".") }},
		{vfs.OpReadDir, func(f *FS) error { _, err := f.ReadDir("."); return err }},
		{vfs.OpStat, func(f *FS) error { _, _, err := f.Stat("."); return err }},
		{vfs.OpLock, func(f *FS) error { _, err := f.Lock("lock"); return err }},
		{vfs.OpRename, func(f *FS) error { return f.Rename("a", "b") }},
		{vfs.OpRemove, func(f *FS) error { return f.Remove("a") }},
	}
	for _, tt := range tests {
		t.Run(tt.op.String(), func(t *testing.T) {
			mem := vfs.NewMem()
			if err := vfs.WriteFileAtomic(mem, "a", []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			f := Wrap(mem, FromNth(tt.op, 1, ErrInjected))
			if err := tt.run(f); !errors.Is(err, ErrInjected) {
				t.Fatalf("%v: %v, want ErrInjected", tt.op, err)
			}
			if f.CountOp(tt.op) != 1 || f.Count() != 1 {
				t.Fatalf("counts: %v", f)
			}
			// The operation did not happen.
			names, err := mem.ReadDir(".")
			if err != nil || !slices.Equal(names, []string{"a"}) {
				t.Fatalf("after failed %v: ReadDir = %v, %v", tt.op, names, err)
			}
		})
	}
}

func TestFS_FailedSyncDropsThroughIntercept(t *testing.T) {
	// errfs stacked on another intercepting layer (as on a kdbtest.Crasher)
	// still reaches the MemFS file.
	mem := vfs.NewMem()
	f := Wrap(vfs.Intercept(mem, func(vfs.Event) error { return nil }), OnNth(vfs.OpSync, 1, ErrInjected))
	file, err := f.OpenFile("f", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.WriteAt([]byte("lost"), 0); err != nil {
		t.Fatal(err)
	}
	if err := file.Sync(); !errors.Is(err, ErrInjected) {
		t.Fatalf("Sync: %v", err)
	}
	if got, err := vfs.ReadFile(mem, "f"); err != nil || len(got) != 0 {
		t.Fatalf("after failed sync: %q, %v; want empty", got, err)
	}
	if err := file.Close(); err != nil {
		t.Fatal(err)
	}
}
