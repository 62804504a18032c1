package supervisor

import "testing"

func TestParseStat(t *testing.T) {
	tests := []struct {
		in   string
		want procStat
		ok   bool
	}{
		{"42 (sleep) S 1 42 42 0 -1", procStat{'S', 1, 42}, true},
		{"7 (a) b) (c) Z 99 5 5 0", procStat{'Z', 99, 5}, true},
		{"7 (x y) Z 3", procStat{}, false},
		{"garbage", procStat{}, false},
	}
	for _, tt := range tests {
		got, ok := parseStat([]byte(tt.in))
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseStat(%q) = %+v, %v; want %+v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
