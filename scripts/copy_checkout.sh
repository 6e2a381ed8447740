# Sourced by scripts/consumer_test.sh and scripts/space_path_test.sh, from
# the repository's root: copy_checkout DEST copies what a checkout of
# tensor_blob holds into DEST (an existing folder), no build products.
# With git, the files git tracks or would track; without it (a copy of
# the checkout, as make compat-test makes), the tree without what
# .gitignore names.
copy_checkout() {
    local dest="$1"
    if git rev-parse --git-dir >/dev/null 2>&1; then
        git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
            [ -e "$f" ] && printf '%s\0' "$f"
        done | tar -cf - --null -T - | tar -xf - -C "$dest"
    else
        tar -cf - --exclude=./.git --exclude=./_build --exclude=./build --exclude=./deps --exclude=./doc \
            --exclude='./priv/*.so' --exclude=./priv/tensor_blob_reaper --exclude=./fuzz/corpus-run \
            --exclude='./examples/*/_build' --exclude='./examples/*/_checkouts' --exclude='./examples/*/deps' \
            --exclude='*.beam' --exclude='*.o' . | tar -xf - -C "$dest"
    fi
}
