package account

import "encoding/base32"

var base32NoPad = base32.StdEncoding.WithPadding(base32.NoPadding)
