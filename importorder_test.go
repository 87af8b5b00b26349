package kdb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/kdb-project/kdb/vfs"
)

// forgeSnapshot encodes a snapshot (FORMAT.md §6) of the given records,
// each a tree name ("t:name") or a key and value ("k:key=value"), with a
// valid trailer: what a damaged-and-resealed or hand-made file looks like.
func forgeSnapshot(recs ...string) []byte {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, exportMagic)
	b = binary.LittleEndian.AppendUint32(b, exportVersion)
	field := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, r := range recs {
		switch r[:2] {
		case "t:":
			b = append(b, exportTree)
			field(r[2:])
		case "k:":
			k, v, _ := strings.Cut(r[2:], "=")
			b = append(b, exportKV)
			field(k)
			field(v)
		}
	}
	sum := xxhash.Sum64(b)
	b = append(b, exportEnd)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(recs)))
	return binary.LittleEndian.AppendUint64(b, sum)
}

// TestImport_RefusesKeysOrTreesOutOfOrder: Export writes each tree once,
// in name order, and each tree's keys once, in key order. Import took a
// snapshot with a valid trailer that broke that order, exit 0: a repeated
// key imported with its last value only (dump showed the first key's
// record gone without a word), keys out of order, a tree repeated (its
// keys merged). Now each is ErrCorrupt naming the record's offset.
func TestImport_RefusesKeysOrTreesOutOfOrder(t *testing.T) {
	mem := vfs.NewMem()
	o := &Options{FS: mem, SegmentSize: 256 << 10}
	good := forgeSnapshot("t:u/a", "k:k1=v1", "k:k2=v2", "t:u/b", "k:k1=x")
	if _, err := Import("/good", bytes.NewReader(good), o); err != nil {
		t.Fatalf("a well-ordered forged snapshot: %v", err)
	}
	cases := map[string][]byte{
		"repeated key":       forgeSnapshot("t:u/a", "k:k1=v1", "k:k1=v2"),
		"keys out of order":  forgeSnapshot("t:u/a", "k:k2=v2", "k:k1=v1"),
		"repeated tree":      forgeSnapshot("t:u/a", "k:k1=v1", "t:u/a", "k:k2=v2"),
		"trees out of order": forgeSnapshot("t:u/b", "k:k1=v1", "t:u/a", "k:k2=v2"),
	}
	i := 0
	for name, snap := range cases {
		i++
		dir := "/bad" + string(rune('0'+i))
		_, err := Import(dir, bytes.NewReader(snap), o)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "offset") {
			t.Errorf("%s: Import: %v, want ErrCorrupt naming the offset", name, err)
		}
		if ok, _ := vfs.Exists(mem, dir+"/db.data"); ok {
			t.Errorf("%s: a store was left at %s", name, dir)
		}
	}
}
