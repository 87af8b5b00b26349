package journal

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/internal/checksum"
	"github.com/kdb-project/kdb/vfs"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/format")

// golden compares got with testdata/format/<name>.golden (a hex dump, 16
// bytes a line), rewriting it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "format", name+".golden")
	var sb strings.Builder
	for i := 0; i < len(got); i += 16 {
		sb.WriteString(hex.EncodeToString(got[i:min(i+16, len(got))]))
		sb.WriteByte('\n')
	}
	if *update {
		if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./journal -update)", err)
	}
	if string(want) != sb.String() {
		t.Fatalf("%s changed: the on-disk format changed without a FormatVersion bump?\ngot:\n%swant:\n%s", path, sb.String(), want)
	}
}

var goldenHeader = segHeader{id: 7, seed: 0x0123456789abcdef, created: 1_800_000_000_000_000_000,
	store: [16]byte{0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf}}

func TestSegmentHeader_Golden(t *testing.T) {
	b := encodeSegHeader(goldenHeader)
	golden(t, "segment-header", b)
	if string(b[:8]) != "KDBJRNL\x1a" || binary.LittleEndian.Uint32(b[segOffVersion:]) != FormatVersion || binary.LittleEndian.Uint32(b[segOffID:]) != 7 || b[segOffStoreID] != 0xa0 {
		t.Fatalf("fields not at their FORMAT.md offsets: %x", b)
	}
}

// A version 1 header (written before the store ID, its bytes zero) still
// reads, as a segment of no particular store.
func TestSegmentHeader_Version1Reads(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "format", "segment-header-v1.golden"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(strings.ReplaceAll(string(raw), "\n", ""))
	if err != nil {
		t.Fatal(err)
	}
	h, err := decodeSegHeader(b, "db-7.log")
	want := goldenHeader
	want.store = [16]byte{}
	if err != nil || h != want {
		t.Fatalf("version 1 header: %+v, %v; want %+v", h, err, want)
	}
	if err := h.checkStore(goldenHeader.store, "db-7.log"); err != nil {
		t.Fatalf("a version 1 segment is of no particular store: %v", err)
	}
	// In version 1 the store ID's bytes are reserved: set, it is damage.
	b[segOffStoreID] = 1
	binary.LittleEndian.PutUint64(b[segOffChecksum:], checksumOf(b[:segOffChecksum]))
	if _, err := decodeSegHeader(b, "db-7.log"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("version 1 header with bytes in its reserved field: %v", err)
	}
}

func TestRecordFrame_Golden(t *testing.T) {
	b, sum := appendFrame(nil, goldenHeader.seed, 4096, 0xfeedfacecafebeef, 2048, 42, flagBatchBegin|flagBatchEnd, []byte("hello, journal"))
	golden(t, "record-frame", b)
	if len(b) != 48 || binary.LittleEndian.Uint64(b[recOffSum:]) != sum || binary.LittleEndian.Uint32(b[recOffLength:]) != 14 || b[recOffType] != 42 {
		t.Fatalf("fields not at their FORMAT.md offsets: %x", b)
	}
}

func TestSegmentHeader_Decode(t *testing.T) {
	good := encodeSegHeader(goldenHeader)
	mod := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	resum := func(b []byte) {
		binary.LittleEndian.PutUint64(b[segOffChecksum:], checksumOf(b[:segOffChecksum]))
	}
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"good", good, nil},
		{"short", good[:63], ErrTornTail},
		{"zero", make([]byte, 64), ErrCorrupt},
		{"bad magic", mod(func(b []byte) { b[0] ^= 1 }), ErrCorrupt},
		{"flipped seed", mod(func(b []byte) { b[segOffSeed] ^= 0x80 }), ErrCorrupt},
		{"flipped checksum", mod(func(b []byte) { b[segOffChecksum+7] ^= 1 }), ErrCorrupt},
		{"future version", mod(func(b []byte) { binary.LittleEndian.PutUint32(b[segOffVersion:], FormatVersion+1); resum(b) }), ErrVersionMismatch},
		{"version 0", mod(func(b []byte) { binary.LittleEndian.PutUint32(b[segOffVersion:], 0); resum(b) }), ErrVersionMismatch},
		{"reserved set", mod(func(b []byte) { b[segOffReserved+3] = 1; resum(b) }), ErrCorrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, err := decodeSegHeader(tc.in, "db-7.log")
			if tc.want == nil {
				if err != nil || h != goldenHeader {
					t.Fatalf("got %+v, %v", h, err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), "db-7.log@0") {
				t.Fatalf("error does not name the place: %v", err)
			}
		})
	}
}

func TestRecordFrame_Decode(t *testing.T) {
	const seed, off = 99, 640
	payload := []byte("the payload of a record")
	good, _ := appendFrame(nil, seed, off, 12345, 512, 3, flagBatchBegin, payload)
	mod := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	cases := []struct {
		name      string
		in        []byte
		seed      uint64
		off       int64
		maxRecord int
		want      error
	}{
		{"good", good, seed, off, 1 << 20, nil},
		{"other segment seed", good, seed + 1, off, 1 << 20, ErrCorrupt},
		{"other offset", good, seed, off + 8, 1 << 20, ErrCorrupt},
		{"zero header", make([]byte, 64), seed, off, 1 << 20, ErrTornTail},
		{"short header", good[:20], seed, off, 1 << 20, ErrTornTail},
		{"payload cut", good[:40], seed, off, 1 << 20, ErrTornTail},
		{"length over maximum", good, seed, off, 10, ErrCorrupt},
		{"huge length", mod(func(b []byte) { binary.LittleEndian.PutUint32(b[recOffLength:], 0xffffffff) }), seed, off, 1 << 40, ErrTornTail},
		{"flipped payload", mod(func(b []byte) { b[recHeaderSize+3] ^= 4 }), seed, off, 1 << 20, ErrCorrupt},
		{"flipped prev", mod(func(b []byte) { b[recOffPrev] ^= 1 }), seed, off, 1 << 20, ErrCorrupt},
		{"unknown flag", mod(func(b []byte) { b[recOffFlags] |= 0x80 }), seed, off, 1 << 20, ErrCorrupt},
		{"reserved set", mod(func(b []byte) { b[recOffReserved+2] = 1 }), seed, off, 1 << 20, ErrCorrupt},
		{"synced after record", mod(func(b []byte) { binary.LittleEndian.PutUint32(b[recOffSynced:], off+8) }), seed, off, 1 << 20, ErrCorrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, p, err := decodeFrame(tc.in, tc.seed, 5, tc.off, tc.maxRecord)
			if tc.want == nil {
				if err != nil || !bytes.Equal(p, payload) {
					t.Fatalf("got %q, %v", p, err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), Location{5, tc.off}.String()) {
				t.Fatalf("error does not name the place: %v", err)
			}
		})
	}
}

// decodeFrame decodes and verifies the frame at the start of b, which lies
// at offset off of segment seg; b holds the rest of the segment.
func decodeFrame(b []byte, seed uint64, seg SegmentID, off int64, maxRecord int) (recHeader, []byte, error) {
	h, err := decodeRecHeader(b, seg, off, maxRecord, int64(len(b)))
	if err != nil {
		return h, nil, err
	}
	p := b[recHeaderSize : recHeaderSize+int(h.length)]
	return h, p, verifyRecord(h, b, p, seed, seg, off)
}

func TestRecordFrame_RoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 100, 4096} {
		p := payload(n, 1, n)
		var buf []byte
		var prev uint64 = 77
		var sums []uint64
		off := int64(segHeaderSize)
		for i := 0; i < 3; i++ {
			var sum uint64
			buf, sum = appendFrame(buf, 77, off+int64(len(buf)), prev, 64, RecordType(i), uint8(i), p)
			sums = append(sums, sum)
			prev = sum
		}
		if int64(len(buf)) != 3*frameSize(n) || len(buf)%recAlign != 0 {
			t.Fatalf("n=%d: %d bytes", n, len(buf))
		}
		prev = 77
		for i := 0; i < 3; i++ {
			at := int64(i) * frameSize(n)
			h, got, err := decodeFrame(buf[at:], 77, 1, off+at, 1<<20)
			if err != nil || !bytes.Equal(got, p) || h.prev != prev || h.sum != sums[i] || h.typ != RecordType(i) || h.flags != uint8(i) {
				t.Fatalf("n=%d rec %d: %+v %v", n, i, h, err)
			}
			prev = h.sum
		}
	}
}

func TestSegmentID_Names(t *testing.T) {
	cases := []struct {
		name string
		id   SegmentID
		ok   bool
	}{
		{"db-1.log", 1, true},
		{"db-4294967295.log", 4294967295, true},
		{"db-0.log", 0, false},
		{"db-01.log", 0, false},
		{"db-+1.log", 0, false},
		{"db-4294967296.log", 0, false},
		{"db-1.log.tmp", 0, false},
		{"db.data", 0, false},
		{"db-.log", 0, false},
	}
	for _, tc := range cases {
		id, ok := parseSegmentName(tc.name)
		if ok != tc.ok || id != tc.id {
			t.Errorf("%s: got %d %v", tc.name, id, ok)
		}
		if ok && id.String() != tc.name {
			t.Errorf("%d.String() = %s", id, id.String())
		}
	}
	if s := (Location{7, 4096}).String(); s != "db-7.log@4096" {
		t.Errorf("Location.String() = %s", s)
	}
	if !(Location{1, 100}).Less(Location{2, 64}) || (Location{2, 64}).Less(Location{2, 64}) || !(Location{2, 64}).Less(Location{2, 72}) {
		t.Error("Location.Less")
	}
}

// FuzzSegmentHeader: no input panics; every error is ErrCorrupt,
// ErrTornTail or ErrVersionMismatch; what decodes re-encodes identically.
func FuzzSegmentHeader(f *testing.F) {
	f.Add(encodeSegHeader(goldenHeader))
	f.Add(make([]byte, 64))
	f.Add([]byte("KDBJRNL\x1a"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeSegHeader(b, "db-1.log")
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTornTail) && !errors.Is(err, ErrVersionMismatch) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if !bytes.Equal(encodeSegHeader(h), b[:segHeaderSize]) {
			t.Fatalf("decoded header does not re-encode to its bytes")
		}
	})
}

// FuzzReadRecord feeds arbitrary bytes as the records of a segment (after
// a valid header) through the decoder and through Open: no panic, errors
// are ErrCorrupt or ErrTornTail, allocation is bounded by MaxRecordSize.
func FuzzReadRecord(f *testing.F) {
	seed := goldenHeader.seed
	var frames []byte
	var prev uint64 = seed
	for i := 0; i < 3; i++ {
		off := int64(segHeaderSize + len(frames))
		frames, prev = appendFrame(frames, seed, off, prev, segHeaderSize, RecordType(i), flagBatchBegin|flagBatchEnd, []byte("payload"))
	}
	f.Add(frames)
	f.Add(frames[:len(frames)-5])
	f.Add(make([]byte, 100))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		// The decoder alone, frame by frame.
		off := int64(segHeaderSize)
		for rest := b; len(rest) > 0; {
			h, _, err := decodeFrame(rest, seed, 1, off, 1024)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTornTail) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				break
			}
			n := frameSize(int(h.length))
			if n > int64(len(rest)) {
				t.Fatalf("frame of %d bytes decoded from %d", n, len(rest))
			}
			rest, off = rest[n:], off+n
		}
		// Open on a segment holding these bytes, read-only: no panic, and
		// any error is ErrCorrupt.
		fs := newFuzzFS(t, b)
		j, _, err := Open(testDir, Options{FS: fs, SegmentSize: 8192, MaxRecordSize: 1024, ReadOnly: true})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: unexpected error kind: %v", err)
			}
			return
		}
		defer j.Close()
		if err := j.Iterate(Location{}, func(Location, Record) error { return nil }); err != nil {
			t.Fatalf("Iterate after a clean Open: %v", err)
		}
	})
}

func checksumOf(b []byte) uint64 { return checksum.Sum64(b) }

// newFuzzFS returns a MemFS with one segment, db-1.log: a valid header
// (seed goldenHeader.seed) followed by b.
func newFuzzFS(t *testing.T, b []byte) vfs.FS {
	fs := vfs.NewMem()
	if err := fs.MkdirAll(testDir, 0o750); err != nil {
		t.Fatal(err)
	}
	h := goldenHeader
	h.id = 1
	data := append(encodeSegHeader(h), b...)
	if err := vfs.WriteFileAtomic(fs, testDir+"/db-1.log", data, 0o600); err != nil {
		t.Fatal(err)
	}
	return fs
}
