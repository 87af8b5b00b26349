package pagefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/kdb-project/kdb/internal/checksum"
)

// TestCodec_MetaAndPageFieldChecks guards the field checks of decodeMeta
// and decodePageHeader on images whose checksum is valid (a meta slot or
// page of another store, of another page size, or written by a buggy or
// foreign tool): only the field check can refuse them. A meta slot of
// another store or page size would otherwise win the slot election; a root
// equal to the page count lies past the last page; a slot image in the
// other slot's position would make the two slots disagree on which is
// newest; a page with flag or reserved bytes set is of a format this build
// does not know.
func TestCodec_MetaAndPageFieldChecks(t *testing.T) {
	const slot = 1 // goldenMeta.Seq is 7
	resealMeta := func(f func(m *Meta, b []byte)) []byte {
		b := make([]byte, 4096)
		m := goldenMeta
		m.App = nil
		f(&m, nil)
		encodeMeta(b, &m, goldenStoreID)
		f(nil, b)
		binary.LittleEndian.PutUint64(b[metaChecksum:], checksum.Sum64(b[8:metaFixedSize]))
		return b
	}
	good := resealMeta(func(*Meta, []byte) {})
	if _, err := decodeMeta(good, slot, goldenHeader, "db.data", 4096); err != nil {
		t.Fatalf("valid meta: %v", err)
	}
	metaCases := []struct {
		name string
		b    []byte
	}{
		{"store ID of another store", resealMeta(func(_ *Meta, b []byte) {
			if b != nil {
				b[metaStoreID] ^= 0xff
			}
		})},
		{"page size other than the header's", resealMeta(func(m *Meta, _ []byte) {
			if m != nil {
				m.PageSize = 8192
			}
		})},
		{"root equal to the page count", resealMeta(func(m *Meta, _ []byte) {
			if m != nil {
				m.Root = PageID(m.PageCount)
			}
		})},
		{"root in the meta pages", resealMeta(func(m *Meta, _ []byte) {
			if m != nil {
				m.Root = FirstDataPage - 1
			}
		})},
		{"slot field of the other slot", resealMeta(func(_ *Meta, b []byte) {
			if b != nil {
				binary.LittleEndian.PutUint16(b[metaSlot:], 0)
			}
		})},
		{"sequence of the other slot", resealMeta(func(m *Meta, b []byte) {
			if b != nil {
				binary.LittleEndian.PutUint64(b[metaSeq:], goldenMeta.Seq+1)
			}
		})},
	}
	for _, tc := range metaCases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := decodeMeta(tc.b, slot, goldenHeader, "db.data", 4096)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeMeta = %+v, %v; want ErrCorrupt", m, err)
			}
		})
	}
	resealPage := func(f func(b []byte)) []byte {
		b := make([]byte, 512)
		encodePage(b, 42, 16, []byte("hello"), 7)
		f(b)
		binary.LittleEndian.PutUint64(b[pgChecksum:], checksum.Sum64(b[8:]))
		return b
	}
	pageCases := []struct {
		name string
		b    []byte
	}{
		{"flags set", resealPage(func(b []byte) { b[pgFlags] = 1 })},
		{"reserved set", resealPage(func(b []byte) { b[pgReserved+1] = 1 })},
		{"type 0", resealPage(func(b []byte) { b[pgType] = 0 })},
		{"payload longer than the page", resealPage(func(b []byte) { binary.LittleEndian.PutUint32(b[pgPayloadLen:], 512-pageHeaderSize+1) })},
	}
	for _, tc := range pageCases {
		t.Run(tc.name, func(t *testing.T) {
			h, err := decodePage(tc.b, 42, "db.data", 42*512)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodePage = %+v, %v; want ErrCorrupt", h, err)
			}
		})
	}
	full := resealPage(func(b []byte) { binary.LittleEndian.PutUint32(b[pgPayloadLen:], 512-pageHeaderSize) })
	if _, err := decodePage(full, 42, "db.data", 0); err != nil {
		t.Fatalf("page with a full payload: %v", err)
	}
}

// TestCodec_HeaderChecksum guards the db.data header's checksum on its
// own: TestFile_MetaSlots damages the store ID, which the meta slots'
// cross-check refuses too, so it passed without the checksum. A page size
// changed to another valid page size (4096 -> 8192) or a damaged
// store ID must be refused by the header itself. (A one-bit flip of a
// page size never gives another valid one: validPageSize refuses it.)
func TestCodec_HeaderChecksum(t *testing.T) {
	hdr := make([]byte, hdrSize)
	encodeHeader(hdr, goldenHeader)
	for _, tc := range []struct {
		name string
		off  int
		bit  byte
	}{
		{"page size 4096 -> 8192", hdrPageSize + 1, 0x30},
		{"store ID", hdrStoreID + 5, 0x01},
		{"zero tail", hdrSize - 1, 0x80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(hdr)
			b[tc.off] ^= tc.bit
			if h, err := decodeHeader(b, "db.data"); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeHeader = %+v, %v; want ErrCorrupt", h, err)
			}
		})
	}
}
