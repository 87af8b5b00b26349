package kdb

import (
	"errors"
	"testing"
)

func TestAppMeta_Decode(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want appMeta
		err  error
	}{
		{"empty", nil, appMeta{}, nil},
		{"v2", appMeta{replayBps: 123456}.encode(), appMeta{replayBps: 123456}, nil},
		{"v1", append([]byte{1}, make([]byte, 12)...), appMeta{}, nil},
		{"v1 with rate", []byte{1, 7, 0, 0, 0, 0, 0, 0, 0}, appMeta{replayBps: 7}, nil},
		{"v2 short", []byte{2, 1, 2}, appMeta{}, ErrCorrupt},
		{"v1 long", append([]byte{1}, make([]byte, 13)...), appMeta{}, ErrCorrupt},
		{"v9", []byte{9, 0, 0, 0, 0, 0, 0, 0, 0}, appMeta{}, ErrVersionMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeAppMeta(tc.in)
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) || got != tc.want {
				t.Fatalf("decodeAppMeta(%x) = %+v, %v; want %+v, %v", tc.in, got, err, tc.want, tc.err)
			}
		})
	}
}
