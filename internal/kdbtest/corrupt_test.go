package kdbtest

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// setup returns a MemFS holding a durable file "f" of 1000 bytes of 0xAA.
func setup(t *testing.T) (*vfs.MemFS, []byte) {
	t.Helper()
	mem := vfs.NewMem()
	data := bytes.Repeat([]byte{0xAA}, 1000)
	if err := vfs.WriteFileAtomic(mem, "f", data, 0o600); err != nil {
		t.Fatal(err)
	}
	return mem, data
}

// durable returns the content of name after a crash that drops everything
// unsynced.
func durable(t *testing.T, mem *vfs.MemFS, name string) []byte {
	t.Helper()
	b, err := vfs.ReadFile(mem.CrashClone(vfs.CrashOptions{}), name)
	if err != nil {
		t.Fatalf("read %s from crash image: %v", name, err)
	}
	return b
}

func TestFlipBit(t *testing.T) {
	mem, want := setup(t)
	if err := FlipBit(mem, "f", 10, 3); err != nil {
		t.Fatal(err)
	}
	want[10] ^= 1 << 3
	if got := durable(t, mem, "f"); !bytes.Equal(got, want) {
		t.Fatalf("byte 10 = %#x, want %#x", got[10], want[10])
	}
	for _, c := range []struct {
		off int64
		bit uint
	}{{1000, 0}, {0, 8}} {
		err := FlipBit(mem, "f", c.off, c.bit)
		if err == nil || !strings.Contains(err.Error(), "f@") {
			t.Errorf("FlipBit(%d, %d) = %v; want an error naming f@offset", c.off, c.bit, err)
		}
	}
}

func TestZeroRange(t *testing.T) {
	mem, want := setup(t)
	if err := ZeroRange(mem, "f", 100, 50); err != nil {
		t.Fatal(err)
	}
	clear(want[100:150])
	if got := durable(t, mem, "f"); !bytes.Equal(got, want) {
		t.Fatal("ZeroRange did not zero exactly [100,150)")
	}
	if err := ZeroRange(mem, "f", 990, 20); err == nil || !strings.Contains(err.Error(), "f@990") {
		t.Fatalf("ZeroRange beyond the end = %v", err)
	}
}

func TestTruncate(t *testing.T) {
	mem, want := setup(t)
	if err := Truncate(mem, "f", 300); err != nil {
		t.Fatal(err)
	}
	if got := durable(t, mem, "f"); !bytes.Equal(got, want[:300]) {
		t.Fatalf("len %d after Truncate(300)", len(got))
	}
}

func TestCopyFile(t *testing.T) {
	mem, want := setup(t)
	if err := CopyFile(mem, "f", "g"); err != nil {
		t.Fatal(err)
	}
	if got := durable(t, mem, "g"); !bytes.Equal(got, want) {
		t.Fatal("copy differs")
	}
	if err := CopyFile(mem, "missing", "h"); err == nil {
		t.Fatal("CopyFile of a missing file succeeded")
	}
}
