package pagefile

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/format/*.golden")

var (
	goldenStoreID = [16]byte{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10}
	goldenID      = CheckpointID{Seq: 7, Rand: [8]byte{0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7}}
	goldenHeader  = fileHeader{pageSize: 4096, storeID: goldenStoreID}
	goldenMeta    = Meta{Seq: 7, ID: goldenID, PageSize: 4096, PageCount: 1000, Root: 42, ReplaySegment: 3, ReplayOffset: 4096, App: []byte("app")}
)

func goldenFreeList() *freeList {
	l := newFreeList()
	for _, r := range []Range{{3, 1}, {10, 4}, {900, 100}} {
		if err := l.freeRange(r); err != nil {
			panic(err)
		}
	}
	return l
}

func goldenRedo() []byte {
	ps := 512
	h := fileHeader{pageSize: ps, storeID: goldenStoreID}
	m := goldenMeta
	m.PageSize = uint32(ps)
	images := make([]byte, 3*ps)
	encodeMeta(images[:ps], &m, h.storeID)
	encodePage(images[ps:2*ps], 5, 16, []byte("five"), m.Seq)
	encodePage(images[2*ps:], 6, PageFree, nil, m.Seq)
	positions := []uint64{metaSlotPage + m.Seq%2, 5, 6}
	head := encodeRedoHead(h.storeID, m.ID, ps, m.PageCount, positions)
	sums := make([]byte, 8*3)
	for i := range positions {
		putSum(sums[8*i:], images[i*ps:(i+1)*ps])
	}
	return bytes.Join([][]byte{head, images, redoTrailer(head, sums)}, nil)
}

// TestFormat_Golden pins the bytes of each encoding. Regenerate with
// go test ./pagefile -run TestFormat_Golden -update, and review the diff.
func TestFormat_Golden(t *testing.T) {
	hdr := make([]byte, hdrSize)
	encodeHeader(hdr, goldenHeader)
	meta := make([]byte, 4096)
	encodeMeta(meta, &goldenMeta, goldenStoreID)
	page := make([]byte, 512)
	encodePage(page, 42, 16, []byte("hello, page"), 7)
	tests := []struct {
		name string
		b    []byte
	}{
		{"header", hdr},
		{"meta_slot", meta[:metaFixedSize+len(goldenMeta.App)]},
		{"page_header", page[:pageHeaderSize+16]},
		{"free_file", encodeFreeFile(goldenStoreID, goldenID, 1000, goldenFreeList())},
		{"redo_head_trailer", func() []byte {
			r := goldenRedo()
			return append(r[:redoHeaderSize+3*8:redoHeaderSize+3*8], r[len(r)-redoTrailerSize:]...)
		}()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join("testdata", "format", tc.name+".golden")
			got := hex.Dump(tc.b)
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if got != string(want) {
				t.Fatalf("%s changed:\n got:\n%s\nwant:\n%s", path, got, want)
			}
		})
	}
}

func TestCodec_RoundTrips(t *testing.T) {
	hdr := make([]byte, hdrSize)
	encodeHeader(hdr, goldenHeader)
	if h, err := decodeHeader(hdr, "db.data"); err != nil || h != goldenHeader {
		t.Fatalf("header: %+v %v", h, err)
	}
	meta := make([]byte, 4096)
	encodeMeta(meta, &goldenMeta, goldenStoreID)
	m, err := decodeMeta(meta, 1, goldenHeader, "db.data", 4096)
	if err != nil || m.ID != goldenMeta.ID || m.Root != 42 || string(m.App) != "app" || m.PageCount != 1000 || m.ReplayOffset != 4096 {
		t.Fatalf("meta: %+v %v", m, err)
	}
	if _, err := decodeMeta(meta, 0, goldenHeader, "db.data", 4096); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("meta in the wrong slot: %v", err)
	}
	page := make([]byte, 512)
	encodePage(page, 42, 16, []byte("hello"), 7)
	if h, err := decodePage(page, 42, "db.data", 0); err != nil || h.typ != 16 || h.payloadLen != 5 || h.checkpoint != 7 {
		t.Fatalf("page: %+v %v", h, err)
	}
	if _, err := decodePage(page, 43, "db.data", 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("page at the wrong position: %v", err)
	}
	r := goldenRedo()
	h, err := decodeRedo(bytes.NewReader(r), int64(len(r)), "db.redo")
	if err != nil || h.id != goldenID || len(h.positions) != 3 || h.pageCount != 1000 {
		t.Fatalf("redo: %+v %v", h, err)
	}
	if _, err := decodeRedo(bytes.NewReader(r[:len(r)-1]), int64(len(r)-1), "db.redo"); !errors.Is(err, errRedoIncomplete) {
		t.Fatalf("short redo: %v", err)
	}
	if got := goldenID.String(); got != "7-a0a1a2a3a4a5a6a7" {
		t.Fatalf("CheckpointID.String() = %q", got)
	}
	if got := PageID(42).String(); got != "page 42" {
		t.Fatalf("PageID.String() = %q", got)
	}
}

func isDecodeError(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrVersionMismatch) || errors.Is(err, errRedoIncomplete)
}

func FuzzDecodeMeta(f *testing.F) {
	meta := make([]byte, 512)
	m := goldenMeta
	m.PageSize = 512
	encodeMeta(meta, &m, goldenStoreID)
	f.Add(meta, uint8(1))
	f.Add(meta[:100], uint8(1))
	f.Add(make([]byte, 512), uint8(0))
	h := fileHeader{pageSize: 512, storeID: goldenStoreID}
	f.Fuzz(func(t *testing.T, b []byte, slot uint8) {
		m, err := decodeMeta(b, int(slot%2), h, "db.data", 512)
		if err != nil {
			if !isDecodeError(err) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		buf := make([]byte, 512)
		encodeMeta(buf, &m, h.storeID)
		m2, err := decodeMeta(buf, int(slot%2), h, "db.data", 512)
		if err != nil || m2.ID != m.ID || m2.PageCount != m.PageCount || !bytes.Equal(m2.App, m.App) {
			t.Fatalf("re-encoded meta: %+v %v", m2, err)
		}
	})
}

func FuzzDecodePage(f *testing.F) {
	page := make([]byte, 512)
	encodePage(page, 42, 16, []byte("hello"), 7)
	f.Add(page, uint64(42))
	f.Add(page[:40], uint64(42))
	f.Add(make([]byte, 512), uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, id uint64) {
		h, err := decodePage(b, PageID(id), "db.data", 0)
		if err != nil {
			if !isDecodeError(err) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
		} else if h.payloadLen > len(b)-pageHeaderSize || h.id != PageID(id) {
			t.Fatalf("accepted a bad header %+v", h)
		}
		// The header decoder alone (checksum skipped) must be safe too.
		if _, err := decodePageHeader(b, PageID(id), "db.data", 0); err != nil && !isDecodeError(err) {
			t.Fatalf("error %v is not ErrCorrupt", err)
		}
	})
}

func FuzzDecodeFreeFile(f *testing.F) {
	good := encodeFreeFile(goldenStoreID, goldenID, 1000, goldenFreeList())
	f.Add(good)
	f.Add(good[:freeHeaderSize])
	f.Add(encodeFreeFile(goldenStoreID, goldenID, 3, newFreeList()))
	f.Fuzz(func(t *testing.T, b []byte) {
		ff, err := decodeFreeFile(b, "db.free")
		if err != nil {
			if !isDecodeError(err) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		l := ff.toFreeList()
		if again := encodeFreeFile(ff.storeID, ff.id, ff.pageCount, l); !bytes.Equal(again, b) {
			t.Fatal("an accepted db.free does not re-encode to the same bytes")
		}
	})
}

func FuzzDecodeRedo(f *testing.F) {
	good := goldenRedo()
	f.Add(good)
	f.Add(good[:redoHeaderSize+24])
	f.Add(good[:len(good)-redoTrailerSize])
	marked := bytes.Clone(good)
	binary.LittleEndian.PutUint32(marked[len(marked)-redoTrailerSize+trailerApplied:], redoAppliedMagic)
	f.Add(marked)
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = redoAlreadyApplied(bytes.NewReader(b), int64(len(b)), goldenStoreID, goldenID) // must not panic
		h, err := decodeRedo(bytes.NewReader(b), int64(len(b)), "db.redo")
		if err != nil {
			if !isDecodeError(err) {
				t.Fatalf("error %v is neither incomplete nor ErrCorrupt", err)
			}
			return
		}
		if redoSize(len(h.positions), h.pageSize) != int64(len(b)) {
			t.Fatalf("accepted a redo of the wrong size")
		}
	})
}

func TestRedoAlreadyApplied(t *testing.T) {
	good := goldenRedo()
	marked := bytes.Clone(good)
	binary.LittleEndian.PutUint32(marked[len(marked)-redoTrailerSize+trailerApplied:], redoAppliedMagic)
	other := goldenID
	other.Rand[0]++
	tests := []struct {
		name string
		b    []byte
		id   CheckpointID
		want bool
	}{
		{"unmarked", good, goldenID, false},
		{"marked", marked, goldenID, true},
		{"marked, other checkpoint", marked, other, false},
		{"marked, truncated", marked[:len(marked)-1], goldenID, false},
		{"marked, empty", nil, goldenID, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := redoAlreadyApplied(bytes.NewReader(tc.b), int64(len(tc.b)), goldenStoreID, tc.id); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	// The mark is outside the checksum: a marked batch still decodes.
	if _, err := decodeRedo(bytes.NewReader(marked), int64(len(marked)), "db.redo"); err != nil {
		t.Fatal(err)
	}
}
