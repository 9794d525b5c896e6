package msb

import (
	"errors"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	good := map[string]float64{
		"512": 512, "512M": 512, "512m": 512, "1G": 1024, "1g": 1024, "1.5G": 1536, "0.5G": 512, "1": 1, "2.25M": 2.25,
	}
	for in, want := range good {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{
		"", "M", "G", "1Gi", "1GB", "512K", "512k", "1T", "0", "0M", "0.5", "-1G", "+1G", "1e3", "1.G", ".5G",
		" 1G", "1G ", "1,5G", "1..5G", "NaN", "Inf", "1MM", "0x10",
		"1" + string(make([]byte, 400)),
	} {
		if v, err := ParseSize(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseSize(%q) = %v, %v; want ErrInvalid", bad, v, err)
		}
	}
	huge := "9" + string(repeat('9', 400)) + "G"
	if _, err := ParseSize(huge); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseSize(huge) = %v, want ErrInvalid", err)
	}
}

func repeat(c byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

func TestParseDuration(t *testing.T) {
	good := map[string]time.Duration{
		"30s": 30 * time.Second, "5m": 5 * time.Minute, "2h": 2 * time.Hour, "90": 90 * time.Second, "007s": 7 * time.Second,
	}
	for in, want := range good {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{
		"", "s", "0", "0s", "500ms", "1d", "1h30m", "1.5h", "-5s", "+5s", " 5s", "5S", "5 s", "99999999999999999999h", "3000000h",
	} {
		if v, err := ParseDuration(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseDuration(%q) = %v, %v; want ErrInvalid", bad, v, err)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second:                   "1s",
		1500 * time.Millisecond:       "2s",
		time.Nanosecond:               "1s",
		2 * time.Hour:                 "7200s",
		time.Minute - time.Nanosecond: "60s",
		0:                             "0s",
		-time.Second:                  "0s",
		time.Duration(1<<63 - 1):      "9223372037s",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
		// The largest Duration rounds up past what ParseDuration can return.
		if d > 0 && d < time.Duration(1<<62) {
			back, err := ParseDuration(FormatDuration(d))
			if err != nil || back < d {
				t.Errorf("ParseDuration(FormatDuration(%v)) = %v, %v; want >= %v", d, back, err, d)
			}
		}
	}
}

func TestValidationErrorText(t *testing.T) {
	err := invalid("memory", "1Gi", "must be a number")
	if got, want := err.Error(), `msb: invalid memory "1Gi": must be a number`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	long := invalid("name", string(repeat('x', 500)), "too long").Error()
	if len(long) > 200 {
		t.Errorf("message not bounded: %d bytes", len(long))
	}
}
