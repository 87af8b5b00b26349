package journal

import (
	"encoding/binary"
	"fmt"
	"os"

	"github.com/kdb-project/kdb/internal/checksum"
	"github.com/kdb-project/kdb/vfs"
)

// FormatVersion is the journal format version written in every segment
// header (FORMAT.md §4.2). Version 2 added the store ID; version 1
// segments (zero there) are read as before. A segment with another
// version is refused with ErrVersionMismatch.
const FormatVersion = 2

// minFormatVersion is the oldest segment version this build reads.
const minFormatVersion = 1

// Segment file names: FORMAT.md §4.1.
const (
	segmentPrefix = "db-"
	segmentSuffix = ".log"
	tmpSuffix     = ".tmp" // db-<N>.log.tmp: a segment being created; removed by Open
)

// Segment header: FORMAT.md §4.2. These values are part of the on-disk
// format; changing one requires a FormatVersion bump.
const (
	segHeaderSize  = 64
	segOffMagic    = 0  // [8]byte: segmentMagic
	segOffVersion  = 8  // uint32: FormatVersion
	segOffID       = 12 // uint32: segment number N of db-<N>.log
	segOffSeed     = 16 // uint64: random seed of this segment generation
	segOffCreated  = 24 // int64: creation time, Unix nanoseconds (informational)
	segOffStoreID  = 32 // [16]byte (version 2): the store's ID (Options.StoreID); zero: none given. Version 1: zero
	segOffReserved = 48 // [8]byte: zero
	segOffChecksum = 56 // uint64: xxhash64 of bytes [0, 56)
)

// segmentMagic opens every segment file (FORMAT.md §4.2).
var segmentMagic = [8]byte{'K', 'D', 'B', 'J', 'R', 'N', 'L', 0x1a}

// Record frame: FORMAT.md §4.3. These values are part of the on-disk
// format; changing one requires a FormatVersion bump.
const (
	recHeaderSize  = 32
	recOffSum      = 0  // uint64: seeded, chained xxhash64 (see recordSum)
	recOffPrev     = 8  // uint64: sum of the previous record in the segment; the segment seed for the first
	recOffLength   = 16 // uint32: payload length in bytes
	recOffSynced   = 20 // uint32: segment offset up to which the segment was durable when this record was written
	recOffType     = 24 // uint8: RecordType
	recOffFlags    = 25 // uint8: flag* bits
	recOffReserved = 26 // [6]byte: zero
	recAlign       = 8  // frames start at multiples of 8; padding bytes are zero

	flagBatchBegin = 1 << 0 // first record of a batch
	flagBatchEnd   = 1 << 1 // last record of a batch (a one-record batch has both)
	flagsKnown     = flagBatchBegin | flagBatchEnd

	// sumOffsetMix spreads the record offset into the checksum seed:
	// seed = segment seed XOR (offset * sumOffsetMix), mod 2^64.
	sumOffsetMix = 0x9E3779B97F4A7C15
)

// Reserved record types: FORMAT.md §4.4. The journal writes these itself;
// Append refuses them and Iterate does not deliver them.
const (
	// MinReservedType is the lowest RecordType reserved by the journal.
	MinReservedType RecordType = 0xF0
	// typeCloseMark is written by Close after the last batch: its synced
	// field proves every earlier byte of the segment was durable.
	typeCloseMark RecordType = 0xFE
	// typeSeal is the last record of every segment but the active one.
	typeSeal RecordType = 0xFF
)

// maxSegmentSize bounds Options.SegmentSize: offsets inside a segment are
// stored as uint32 (the record's synced field).
const maxSegmentSize = 1 << 31

// segHeader is a decoded segment header.
type segHeader struct {
	id      SegmentID
	seed    uint64
	created int64
	store   [16]byte // zero: none given, or a version 1 segment
}

func encodeSegHeader(h segHeader) []byte {
	b := make([]byte, segHeaderSize)
	copy(b[segOffMagic:], segmentMagic[:])
	binary.LittleEndian.PutUint32(b[segOffVersion:], FormatVersion)
	binary.LittleEndian.PutUint32(b[segOffID:], uint32(h.id))
	binary.LittleEndian.PutUint64(b[segOffSeed:], h.seed)
	binary.LittleEndian.PutUint64(b[segOffCreated:], uint64(h.created))
	copy(b[segOffStoreID:], h.store[:])
	binary.LittleEndian.PutUint64(b[segOffChecksum:], checksum.Sum64(b[:segOffChecksum]))
	return b
}

// decodeSegHeader decodes and verifies a segment header read from the file
// named name. Errors wrap ErrCorrupt, ErrTornTail (short) or
// ErrVersionMismatch.
func decodeSegHeader(b []byte, name string) (segHeader, error) {
	if len(b) < segHeaderSize {
		return segHeader{}, fmt.Errorf("%w: %s@0: segment header: %d bytes, want %d", ErrTornTail, name, len(b), segHeaderSize)
	}
	b = b[:segHeaderSize]
	if [8]byte(b[segOffMagic:segOffMagic+8]) != segmentMagic {
		return segHeader{}, fmt.Errorf("%w: %s@0: segment header: bad magic %x", ErrCorrupt, name, b[segOffMagic:segOffMagic+8])
	}
	if want, got := binary.LittleEndian.Uint64(b[segOffChecksum:]), checksum.Sum64(b[:segOffChecksum]); want != got {
		return segHeader{}, fmt.Errorf("%w: %s@0: segment header: checksum mismatch", ErrCorrupt, name)
	}
	v := binary.LittleEndian.Uint32(b[segOffVersion:])
	if v < minFormatVersion || v > FormatVersion {
		return segHeader{}, fmt.Errorf("%w: %s@0: segment format version %d, this build reads %d to %d", ErrVersionMismatch, name, v, minFormatVersion, FormatVersion)
	}
	reserved := b[segOffReserved:segOffChecksum]
	if v == 1 {
		reserved = b[segOffStoreID:segOffChecksum]
	}
	for _, c := range reserved {
		if c != 0 {
			return segHeader{}, fmt.Errorf("%w: %s@0: segment header: reserved bytes not zero", ErrCorrupt, name)
		}
	}
	return segHeader{
		id:      SegmentID(binary.LittleEndian.Uint32(b[segOffID:])),
		seed:    binary.LittleEndian.Uint64(b[segOffSeed:]),
		created: int64(binary.LittleEndian.Uint64(b[segOffCreated:])),
		store:   [16]byte(b[segOffStoreID : segOffStoreID+16]),
	}, nil
}

// recHeader is a decoded record frame header.
type recHeader struct {
	sum    uint64
	prev   uint64
	length uint32
	synced uint32
	typ    RecordType
	flags  uint8
}

// frameSize returns the size of a frame carrying n payload bytes, padding
// included.
func frameSize(n int) int64 {
	return (int64(recHeaderSize) + int64(n) + recAlign - 1) &^ (recAlign - 1)
}

// recordSum is the checksum of a record at offset off of a segment with the
// given seed: xxhash64 seeded with seed^(off*sumOffsetMix) over header bytes
// [8, 32) (which include prev, the chain link) followed by the payload.
func recordSum(seed uint64, off int64, hdrTail, payload []byte) uint64 {
	return checksum.Seeded2(seed^(uint64(off)*sumOffsetMix), hdrTail, payload)
}

// appendFrame appends the frame of one record to dst and returns it with the
// record's sum. off is the segment offset at which the frame will lie.
func appendFrame(dst []byte, seed uint64, off int64, prev uint64, synced uint32, typ RecordType, flags uint8, payload []byte) ([]byte, uint64) {
	start := len(dst)
	size := int(frameSize(len(payload)))
	dst = append(dst, make([]byte, size)...)
	f := dst[start : start+size]
	binary.LittleEndian.PutUint64(f[recOffPrev:], prev)
	binary.LittleEndian.PutUint32(f[recOffLength:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(f[recOffSynced:], synced)
	f[recOffType] = byte(typ)
	f[recOffFlags] = flags
	copy(f[recHeaderSize:], payload)
	sum := recordSum(seed, off, f[recOffPrev:recHeaderSize], payload)
	binary.LittleEndian.PutUint64(f[recOffSum:], sum)
	return dst, sum
}

// isZero reports whether b is all zero bytes.
func isZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// decodeRecHeader decodes the frame header at b (segment offset off of the
// segment loc names) and bounds its length: against maxRecord and against
// avail, the bytes of the segment available from off. It does not verify
// the checksum (see verifyRecord). Errors wrap ErrCorrupt or ErrTornTail.
func decodeRecHeader(b []byte, seg SegmentID, off int64, maxRecord int, avail int64) (recHeader, error) {
	loc := Location{seg, off}
	if len(b) < recHeaderSize || avail < recHeaderSize {
		return recHeader{}, fmt.Errorf("%w: %s: frame header runs past the end of the segment", ErrTornTail, loc)
	}
	h := recHeader{
		sum:    binary.LittleEndian.Uint64(b[recOffSum:]),
		prev:   binary.LittleEndian.Uint64(b[recOffPrev:]),
		length: binary.LittleEndian.Uint32(b[recOffLength:]),
		synced: binary.LittleEndian.Uint32(b[recOffSynced:]),
		typ:    RecordType(b[recOffType]),
		flags:  b[recOffFlags],
	}
	if isZero(b[:recHeaderSize]) {
		return h, fmt.Errorf("%w: %s: zeroed frame header", ErrTornTail, loc)
	}
	if h.flags&^flagsKnown != 0 || !isZero(b[recOffReserved:recHeaderSize]) {
		return h, fmt.Errorf("%w: %s: unknown flags %#x or reserved bytes set", ErrCorrupt, loc, h.flags)
	}
	if int64(h.length) > int64(maxRecord) {
		if frameSize(int(h.length)) <= avail {
			return h, fmt.Errorf("%w: %s: record length %d exceeds the maximum %d: damaged, or written with a larger MaxRecordSize (then reopen with it)", errAboveMax, loc, h.length, maxRecord)
		}
		return h, fmt.Errorf("%w: %s: record length %d exceeds the maximum %d", ErrCorrupt, loc, h.length, maxRecord)
	}
	if int64(h.synced) > off {
		return h, fmt.Errorf("%w: %s: synced offset %d lies after the record", ErrCorrupt, loc, h.synced)
	}
	if frameSize(int(h.length)) > avail {
		return h, fmt.Errorf("%w: %s: record of %d bytes runs past the end of the segment", ErrTornTail, loc, h.length)
	}
	return h, nil
}

// verifyRecord checks the sum of a decoded header against its payload.
func verifyRecord(h recHeader, hdr, payload []byte, seed uint64, seg SegmentID, off int64) error {
	if got := recordSum(seed, off, hdr[recOffPrev:recHeaderSize], payload); got != h.sum {
		return fmt.Errorf("%w: %s: checksum mismatch", ErrCorrupt, Location{seg, off})
	}
	return nil
}

// checkStore returns ErrCorrupt if h names a store other than want (both
// given): a segment from another store's directory, whose records verify
// with its own seed and would be replayed as this store's.
func (h segHeader) checkStore(want [16]byte, name string) error {
	if h.store == ([16]byte{}) || want == ([16]byte{}) || h.store == want {
		return nil
	}
	return fmt.Errorf("%w: %s@0: %w (store ID %x; this store's is %x): a file copied in from another store's directory?", ErrCorrupt, name, ErrOtherStore, h.store, want)
}

// SegmentStoreID returns the store ID in the header of the segment file
// at path (zero for a version 1 segment, or one created without
// Options.StoreID). kdbtool rebuilding a lost db.data gives it to the new
// page file, whose journal it is.
func SegmentStoreID(fsys vfs.FS, path string) ([16]byte, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return [16]byte{}, err
	}
	defer f.Close()
	b := make([]byte, segHeaderSize)
	if _, err := f.ReadAt(b, 0); err != nil {
		return [16]byte{}, fmt.Errorf("%w: %s@0: segment header: %v", ErrCorrupt, path, err)
	}
	h, err := decodeSegHeader(b, path)
	return h.store, err
}
