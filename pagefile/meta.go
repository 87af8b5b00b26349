package pagefile

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/kdb-project/kdb/internal/checksum"
)

// Meta is the metadata of one checkpoint, stored in one of db.data's two
// meta slots (slot Seq%2). The newest intact slot wins on Open.
type Meta struct {
	Seq           uint64       // checkpoint sequence (== ID.Seq)
	ID            CheckpointID // the checkpoint's unique ID; db.free must carry the same
	PageSize      uint32
	PageCount     uint64 // page IDs in use are [FirstDataPage, PageCount)
	Root          PageID // the index catalog root (0 = empty)
	ReplaySegment uint64 // journal replay position (plain integers; recovery converts)
	ReplayOffset  uint64
	App           []byte // opaque bytes for the root package, at most MaxAppMeta bytes
}

// MetaUpdate is what the caller sets at a checkpoint.
type MetaUpdate struct {
	Root          PageID
	ReplaySegment uint64
	ReplayOffset  uint64
	App           []byte // at most MaxAppMeta bytes; copied
}

// fileHeader is the decoded db.data header (page 0).
type fileHeader struct {
	pageSize int
	storeID  [16]byte
}

func encodeHeader(buf []byte, h fileHeader) {
	clear(buf[:hdrSize])
	copy(buf[hdrMagic:], dataMagic[:])
	binary.LittleEndian.PutUint32(buf[hdrVersion:], FormatVersion)
	binary.LittleEndian.PutUint32(buf[hdrPageSize:], uint32(h.pageSize))
	copy(buf[hdrStoreID:], h.storeID[:])
	binary.LittleEndian.PutUint64(buf[hdrChecksum:], checksum.Sum64(buf[8:hdrSize]))
}

// decodeHeader decodes the db.data header from b (at least hdrSize bytes
// read at offset 0 of name).
func decodeHeader(b []byte, name string) (fileHeader, error) {
	if len(b) < hdrSize {
		return fileHeader{}, fmt.Errorf("%w: %s@0: header truncated (%d bytes)", ErrCorrupt, name, len(b))
	}
	if !bytes.Equal(b[hdrMagic:hdrMagic+8], dataMagic[:]) {
		return fileHeader{}, fmt.Errorf("%w: %s@%d: bad magic", ErrCorrupt, name, hdrMagic)
	}
	if v := binary.LittleEndian.Uint32(b[hdrVersion:]); v != FormatVersion {
		return fileHeader{}, fmt.Errorf("%w: %s@%d: version %d, want %d", ErrVersionMismatch, name, hdrVersion, v, FormatVersion)
	}
	if checksum.Sum64(b[8:hdrSize]) != binary.LittleEndian.Uint64(b[hdrChecksum:]) {
		return fileHeader{}, fmt.Errorf("%w: %s@0: header checksum mismatch", ErrCorrupt, name)
	}
	h := fileHeader{pageSize: int(binary.LittleEndian.Uint32(b[hdrPageSize:]))}
	copy(h.storeID[:], b[hdrStoreID:])
	if !validPageSize(h.pageSize) {
		return fileHeader{}, fmt.Errorf("%w: %s@%d: page size %d", ErrCorrupt, name, hdrPageSize, h.pageSize)
	}
	return h, nil
}

func validPageSize(n int) bool {
	return n >= minPageSize && n <= maxPageSize && n&(n-1) == 0
}

// encodeMeta writes m into buf (one whole page) as slot m.Seq%2.
func encodeMeta(buf []byte, m *Meta, storeID [16]byte) {
	clear(buf)
	binary.LittleEndian.PutUint32(buf[metaMagicOff:], metaMagic)
	binary.LittleEndian.PutUint16(buf[metaSlot:], uint16(m.Seq%numMetaSlots))
	binary.LittleEndian.PutUint16(buf[metaAppLen:], uint16(len(m.App)))
	binary.LittleEndian.PutUint64(buf[metaSeq:], m.Seq)
	copy(buf[metaRand:], m.ID.Rand[:])
	binary.LittleEndian.PutUint32(buf[metaPageSize:], m.PageSize)
	binary.LittleEndian.PutUint64(buf[metaPageCount:], m.PageCount)
	binary.LittleEndian.PutUint64(buf[metaRoot:], uint64(m.Root))
	binary.LittleEndian.PutUint64(buf[metaReplaySeg:], m.ReplaySegment)
	binary.LittleEndian.PutUint64(buf[metaReplayOff:], m.ReplayOffset)
	copy(buf[metaStoreID:], storeID[:])
	copy(buf[metaFixedSize:], m.App)
	end := metaFixedSize + len(m.App)
	binary.LittleEndian.PutUint64(buf[metaChecksum:], checksum.Sum64(buf[8:end]))
}

// decodeMeta decodes the meta slot image b read from slot of name at byte
// offset off and checks it against the header's page size and store ID.
func decodeMeta(b []byte, slot int, h fileHeader, name string, off int64) (Meta, error) {
	if len(b) < metaFixedSize {
		return Meta{}, fmt.Errorf("%w: %s@%d: meta slot %d truncated", ErrCorrupt, name, off, slot)
	}
	if binary.LittleEndian.Uint32(b[metaMagicOff:]) != metaMagic {
		return Meta{}, fmt.Errorf("%w: %s@%d: meta slot %d: bad magic", ErrCorrupt, name, off, slot)
	}
	appLen := int(binary.LittleEndian.Uint16(b[metaAppLen:]))
	if appLen > MaxAppMeta || metaFixedSize+appLen > len(b) {
		return Meta{}, fmt.Errorf("%w: %s@%d: meta slot %d: app length %d", ErrCorrupt, name, off, slot, appLen)
	}
	end := metaFixedSize + appLen
	if checksum.Sum64(b[8:end]) != binary.LittleEndian.Uint64(b[metaChecksum:]) {
		return Meta{}, fmt.Errorf("%w: %s@%d: meta slot %d: checksum mismatch", ErrCorrupt, name, off, slot)
	}
	m := Meta{
		Seq:           binary.LittleEndian.Uint64(b[metaSeq:]),
		PageSize:      binary.LittleEndian.Uint32(b[metaPageSize:]),
		PageCount:     binary.LittleEndian.Uint64(b[metaPageCount:]),
		Root:          PageID(binary.LittleEndian.Uint64(b[metaRoot:])),
		ReplaySegment: binary.LittleEndian.Uint64(b[metaReplaySeg:]),
		ReplayOffset:  binary.LittleEndian.Uint64(b[metaReplayOff:]),
	}
	m.ID.Seq = m.Seq
	copy(m.ID.Rand[:], b[metaRand:])
	if appLen > 0 {
		m.App = bytes.Clone(b[metaFixedSize:end])
	}
	var sid [16]byte
	copy(sid[:], b[metaStoreID:])
	switch {
	case int(binary.LittleEndian.Uint16(b[metaSlot:])) != slot || m.Seq%numMetaSlots != uint64(slot):
		return Meta{}, fmt.Errorf("%w: %s@%d: meta slot %d holds seq %d for slot %d", ErrCorrupt, name, off, slot, m.Seq, binary.LittleEndian.Uint16(b[metaSlot:]))
	case sid != h.storeID:
		return Meta{}, fmt.Errorf("%w: %s@%d: meta slot %d: store ID %x != header %x", ErrCorrupt, name, off, slot, sid, h.storeID)
	case int(m.PageSize) != h.pageSize:
		return Meta{}, fmt.Errorf("%w: %s@%d: meta slot %d: page size %d != header %d", ErrCorrupt, name, off, slot, m.PageSize, h.pageSize)
	case m.PageCount < uint64(FirstDataPage) || m.PageCount > maxPageCount(h.pageSize):
		return Meta{}, fmt.Errorf("%w: %s@%d: meta slot %d: page count %d", ErrCorrupt, name, off, slot, m.PageCount)
	case m.Root != 0 && (m.Root < FirstDataPage || uint64(m.Root) >= m.PageCount):
		return Meta{}, fmt.Errorf("%w: %s@%d: meta slot %d: root %v outside [%d, %d)", ErrCorrupt, name, off, slot, m.Root, FirstDataPage, m.PageCount)
	}
	return m, nil
}

// maxPageCount bounds page counts read from disk so that offsets never
// overflow int64 (2^62 bytes).
func maxPageCount(pageSize int) uint64 { return (1 << 62) / uint64(pageSize) }
