package vfs

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestOS_MmapSeesLaterWrites(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	f := mustOpen(t, OS, name, os.O_RDWR|os.O_CREATE)
	defer mustClose(t, f)
	if b, err := f.Mmap(0); b != nil || err != nil {
		t.Fatalf("Mmap(0) = %v, %v; want nil, nil", b, err)
	}
	mustWrite(t, f, page(1), 0)
	b, err := f.Mmap(4096)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, page(1)) {
		t.Fatal("mapping does not show the written page")
	}
	mustWrite(t, f, []byte("later"), 100)
	if string(b[100:105]) != "later" {
		t.Fatalf("mapping shows %q after WriteAt, want later", b[100:105])
	}
	if err := f.Munmap(b); err != nil {
		t.Fatal(err)
	}
}

func TestOS_CreatePerm(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	mustClose(t, mustOpen(t, OS, name, os.O_RDWR|os.O_CREATE))
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		t.Fatalf("created with %v, want no group/other access", perm)
	}
	l, err := OS.Lock(filepath.Join(filepath.Dir(name), "lock"))
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	if fi, err := os.Stat(filepath.Join(filepath.Dir(name), "lock")); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Fatalf("lock file: %v, %v", fi.Mode(), err)
	}
}

func TestOS_LockErrorNamesPath(t *testing.T) {
	name := filepath.Join(t.TempDir(), "lock")
	l, err := OS.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, l)
	_, err = OS.Lock(name)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), name) {
		t.Fatalf("second Lock: %v; want ErrLocked naming %s", err, name)
	}
}

// TestOS_UnlockWithACopyOpen: a child forked while the store is open holds
// a copy of the lock's descriptor until its exec; Close must release the
// lock even then, or a reopen right after Close fails with ErrLocked.
func TestOS_UnlockWithACopyOpen(t *testing.T) {
	name := filepath.Join(t.TempDir(), "lock")
	l, err := OS.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	var copyFD int
	err = control(l.(*osLock).f, func(fd int) error {
		var derr error
		copyFD, derr = syscall.Dup(fd) // what a fork leaves in the child
		return derr
	})
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(copyFD)
	mustClose(t, l)
	l2, err := OS.Lock(name)
	if err != nil {
		t.Fatalf("Lock after Close, with a copy of the old descriptor open: %v", err)
	}
	mustClose(t, l2)
}

func TestOS_WriteErrorIsSticky(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	mustClose(t, mustOpen(t, OS, name, os.O_RDWR|os.O_CREATE))
	f := mustOpen(t, OS, name, os.O_RDONLY)
	defer mustClose(t, f)
	_, werr := f.WriteAt([]byte("x"), 0)
	if !errors.Is(werr, syscall.EBADF) {
		t.Fatalf("WriteAt on a read-only file: %v, want EBADF", werr)
	}
	// Every later write-side call returns the first error, Sync included.
	if err := f.Sync(); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("Sync after a failed write: %v, want the sticky EBADF", err)
	}
	if err := f.Truncate(0); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("Truncate after a failed write: %v", err)
	}
}

func TestOS_SyncDirErrors(t *testing.T) {
	dir := t.TempDir()
	if err := OS.SyncDir(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("SyncDir missing: %v", err)
	}
	name := filepath.Join(dir, "f")
	mustClose(t, mustOpen(t, OS, name, os.O_RDWR|os.O_CREATE))
	if err := OS.SyncDir(name); !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("SyncDir on a file: %v, want ENOTDIR", err)
	}
}

// On Linux an OS file starts a range's write-back on request
// (sync_file_range), for the journal's hint before its fdatasync.
func TestOS_StartWriteback(t *testing.T) {
	f, err := OS.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, 8192), 0); err != nil {
		t.Fatal(err)
	}
	ws, ok := f.(WritebackStarter)
	if !ok {
		t.Fatalf("%T is not a WritebackStarter", f)
	}
	if err := ws.StartWriteback(0, 8192); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// A FIFO, a device or a directory at a store's file name is refused at
// once (a FIFO's open would block until a writer came).
func TestOS_OpenFileRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "db.free")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Skip(err)
	}
	link := filepath.Join(dir, "db-1.log")
	if err := os.Symlink("/dev/null", link); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "db.data")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{fifo, link, sub} {
		done := make(chan error, 1)
		go func() {
			f, err := OS.OpenFile(name, os.O_RDONLY, 0)
			if err == nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) {
				t.Fatalf("OpenFile(%s): %v, want ErrNotRegular", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("OpenFile(%s) blocked", name)
		}
		if _, err := OS.Lock(name); !errors.Is(err, ErrNotRegular) {
			t.Fatalf("Lock(%s): %v, want ErrNotRegular", name, err)
		}
	}
	// A regular file, and a name not there yet, open as before.
	f, err := OS.OpenFile(filepath.Join(dir, "new"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// LockStore holds the store's directory as well as its lock file: with the
// lock file deleted, a second LockStore still fails, and after Close the
// store locks again.
func TestOS_LockStoreHoldsTheDirectory(t *testing.T) {
	dir := t.TempDir()
	lk, err := LockStore(OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, StoreLockName)); err != nil {
		t.Fatal(err)
	}
	if lk2, err := LockStore(OS, dir); err == nil {
		lk2.Close()
		t.Fatal("LockStore succeeded twice once the lock file was deleted")
	} else if !errors.Is(err, ErrLocked) {
		t.Fatalf("second LockStore: %v, want ErrLocked", err)
	}
	if err := lk.Close(); err != nil {
		t.Fatal(err)
	}
	lk, err = LockStore(OS, dir)
	if err != nil {
		t.Fatalf("LockStore after Close: %v", err)
	}
	if err := lk.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := OS.(DirLocker).LockDir(filepath.Join(dir, StoreLockName)); err == nil {
		t.Fatal("LockDir of a regular file succeeded")
	}
}
