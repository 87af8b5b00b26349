package pagefile

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/internal/checksum"
	"github.com/kdb-project/kdb/vfs"
)

// encodeRawFreeFile encodes a db.free holding exactly the given ranges, in
// the given order, with a valid checksum: unlike encodeFreeFile it neither
// coalesces nor sorts, and freePages is what the header claims.
func encodeRawFreeFile(storeID [16]byte, id CheckpointID, pageCount uint64, freePages uint64, ranges []Range) []byte {
	buf := make([]byte, freeHeaderSize+len(ranges)*freeRangeSize)
	binary.LittleEndian.PutUint32(buf[freeMagicOff:], freeMagic)
	binary.LittleEndian.PutUint32(buf[freeVersion:], FormatVersion)
	copy(buf[freeStoreID:], storeID[:])
	binary.LittleEndian.PutUint64(buf[freeSeq:], id.Seq)
	copy(buf[freeRand:], id.Rand[:])
	binary.LittleEndian.PutUint64(buf[freePageCount:], pageCount)
	binary.LittleEndian.PutUint64(buf[freeRangeCount:], uint64(len(ranges)))
	binary.LittleEndian.PutUint64(buf[freeFreePages:], freePages)
	for i, r := range ranges {
		off := freeHeaderSize + i*freeRangeSize
		binary.LittleEndian.PutUint64(buf[off+freeRangeStart:], uint64(r.Start))
		binary.LittleEndian.PutUint64(buf[off+freeRangeLen:], r.Len)
	}
	binary.LittleEndian.PutUint64(buf[freeChecksum:], checksum.Sum64(buf[8:]))
	return buf
}

// TestFreeFile_DecodeRefusesBadRangesWithValidChecksum guards the structural
// checks of decodeFreeFile at their exact bounds, on files whose checksum is
// valid (a bad tool, a bug, a mixed backup): a range that ends one page past
// the page count, ranges that touch (not coalesced), and a free-page total
// that disagrees with the ranges. TestFile_FreeFileNeverTrustedWhenWrong
// checks a range four pages past the end only, so an off-by-one in the bound
// passed it. Each such file must be refused (the caller then rebuilds the
// list by a scan), and the exact-fit file accepted.
func TestFreeFile_DecodeRefusesBadRangesWithValidChecksum(t *testing.T) {
	var sid [16]byte
	sid[0] = 7
	id := CheckpointID{Seq: 3, Rand: [8]byte{1, 2, 3}}
	const pc = 40
	first := FirstDataPage
	cases := []struct {
		name      string
		freePages uint64
		ranges    []Range
		ok        bool
	}{
		{"ends exactly at the page count", 2, []Range{{pc - 2, 2}}, true},
		{"two ranges with a gap", 3, []Range{{first, 1}, {first + 2, 2}}, true},
		{"ends one page past the page count", 2, []Range{{pc - 1, 2}}, false},
		{"starts at the page count", 1, []Range{{pc, 1}}, false},
		{"ranges touch", 3, []Range{{first, 1}, {first + 1, 2}}, false},
		{"ranges overlap", 4, []Range{{first, 2}, {first + 1, 2}}, false},
		{"total below the ranges", 2, []Range{{first, 1}, {first + 2, 2}}, false},
		{"total above the ranges", 4, []Range{{first, 1}, {first + 2, 2}}, false},
		{"empty range", 0, []Range{{first, 0}}, false},
		{"range below the first data page", 1, []Range{{first - 1, 1}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := encodeRawFreeFile(sid, id, pc, tc.freePages, tc.ranges)
			ff, err := decodeFreeFile(b, "/db/db.free")
			if tc.ok {
				if err != nil {
					t.Fatalf("valid file refused: %v", err)
				}
				if ff.freePages != tc.freePages || len(ff.ranges) != len(tc.ranges) {
					t.Fatalf("decoded %+v", ff)
				}
				return
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decoded %+v, %v; want ErrCorrupt", ff, err)
			}
		})
	}
}

// TestFile_OversizedFreeFileNotRead guards the size bound Open puts on
// db.free before reading it: a trustworthy db.free holds at most one range
// per two pages, so a larger file is not trusted and, above all, not read
// into memory (a damaged or planted file of any size would otherwise be
// allocated whole at every Open). The other checks would refuse such a
// file too, but only after reading it.
func TestFile_OversizedFreeFileNotRead(t *testing.T) {
	mem := newBase(t, crashTestOpts, 30)
	f, _ := mustOpen(t, mem, crashTestOpts)
	pc := f.Meta().PageCount
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := vfs.ReadFile(mem, "/db/db.free")
	if err != nil {
		t.Fatal(err)
	}
	limit := freeHeaderSize + freeRangeSize*(pc/2+1)
	b = append(b, make([]byte, int(limit)+freeRangeSize-len(b))...)
	if err := vfs.WriteFileAtomic(mem, "/db/db.free", b, 0o600); err != nil {
		t.Fatal(err)
	}
	opened := false
	fsys := vfs.Intercept(mem, func(e vfs.Event) error {
		if e.Op == vfs.OpOpen && e.Path == "/db/db.free" {
			opened = true
		}
		return nil
	})
	f, rep, err := Open("/db", Options{FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if rep.FreeListPath != FreeListScanned || !strings.Contains(rep.Reason, "exceeds") {
		t.Fatalf("path %q reason %q, want scanned because db.free exceeds its bound", rep.FreeListPath, rep.Reason)
	}
	if opened {
		t.Fatal("Open read an oversized db.free")
	}
}
