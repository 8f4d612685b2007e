#!/usr/bin/env bash
# Give the C siw of the cached kernel tree a module parameter for asking for
# MPA CRC. Upstream, mpa_crc_required is a constant false, so siw-to-siw
# connections never use CRC; make bench compares rsiw and siw with CRC on for
# both, which needs siw to ask for it (siw.mpa_crc_required=1). The default
# stays false, so siw behaves as upstream unless the parameter is set.
# Idempotent: the edits only match the unmodified lines.
set -euo pipefail
KDIR=${1:?usage: siw-crc-knob.sh KDIR}
siw=$KDIR/drivers/infiniband/sw/siw

if grep -qx 'const bool mpa_crc_required;' "$siw/siw_main.c"; then
	sed -i 's|^const bool mpa_crc_required;$|bool mpa_crc_required; /* rsiw: a module parameter for make bench */\nmodule_param(mpa_crc_required, bool, 0644);\nMODULE_PARM_DESC(mpa_crc_required, "ask peers for MPA CRC (rsiw bench knob)");|' \
		"$siw/siw_main.c"
fi
sed -i 's|^extern const bool mpa_crc_required;$|extern bool mpa_crc_required;|' "$siw/siw.h"
if ! grep -q '^module_param(mpa_crc_required' "$siw/siw_main.c" ||
	! grep -qx 'extern bool mpa_crc_required;' "$siw/siw.h"; then
	echo "siw-crc-knob: siw's source did not take the CRC knob" >&2
	exit 1
fi
