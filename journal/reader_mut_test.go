package journal

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// rewriteFrame replaces the frame at loc (of a journal on fs) with one of
// the same size whose sum is valid: the payload is transformed by payload
// and the flags by flags; its prev and synced fields are kept.
func rewriteFrame(t *testing.T, fs vfs.FS, loc Location, payload func([]byte) []byte, flags func(uint8) uint8) {
	t.Helper()
	name := testDir + "/" + loc.Segment.String()
	data, err := vfs.ReadFile(fs, name)
	if err != nil {
		t.Fatal(err)
	}
	h, err := decodeSegHeader(data, loc.Segment.String())
	if err != nil {
		t.Fatal(err)
	}
	f := data[loc.Offset:]
	n := binary.LittleEndian.Uint32(f[recOffLength:])
	p := payload(append([]byte(nil), f[recHeaderSize:recHeaderSize+int(n)]...))
	frame, _ := appendFrame(nil, h.seed, loc.Offset, binary.LittleEndian.Uint64(f[recOffPrev:]),
		binary.LittleEndian.Uint32(f[recOffSynced:]), RecordType(f[recOffType]), flags(f[recOffFlags]), p)
	if int64(len(frame)) != frameSize(int(n)) {
		t.Fatalf("rewritten frame of %d bytes, was %d", len(frame), frameSize(int(n)))
	}
	w, err := fs.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteAt(frame, loc.Offset); err != nil {
		t.Fatal(err)
	}
}

// TestIterate_ReverifiesChainAndBatches guards the checks Iterate repeats
// on bytes Open already verified: the file may change under an open
// journal. A frame replaced by another that verifies on its own (right
// sum, right place) breaks the chain into the next frame; a batch whose end
// frame lost its end flag is unfinished at the end of the records. Either
// must make Iterate fail with ErrCorrupt, never deliver the forged record
// or silently drop the unfinished batch.
func TestIterate_ReverifiesChainAndBatches(t *testing.T) {
	t.Run("chain", func(t *testing.T) {
		fs, j, bs := build(t, Options{}, 20)
		mustClose(t, j)
		j2, _ := openMem(t, fs, Options{})
		defer mustClose(t, j2)
		victim := bs[3] // a one-record batch with batches after it
		if len(victim.locs) != 1 {
			t.Fatalf("batch 3 has %d records", len(victim.locs))
		}
		rewriteFrame(t, fs, victim.locs[0], func(p []byte) []byte { p[0] ^= 0x20; return p }, func(f uint8) uint8 { return f })
		err := j2.Iterate(Location{}, func(Location, Record) error { return nil })
		next := bs[4].locs[0]
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), next.String()) {
			t.Fatalf("Iterate: %v, want ErrCorrupt at %v (chain broken)", err, next)
		}
	})
	t.Run("unfinished batch", func(t *testing.T) {
		mem, j, bs := build(t, Options{}, 20)
		fs := mem.Clone() // as a crash leaves it: no close mark after the last batch
		mustClose(t, j)
		j2, _ := openMem(t, fs, Options{})
		defer mustClose(t, j2)
		last := bs[len(bs)-1]
		rewriteFrame(t, fs, lastOf(last), func(p []byte) []byte { return p }, func(f uint8) uint8 { return f &^ flagBatchEnd })
		var got int
		err := j2.Iterate(Location{}, func(Location, Record) error { got++; return nil })
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Iterate: %v after %d records, want ErrCorrupt (the last batch has no end)", err, got)
		}
	})
}
