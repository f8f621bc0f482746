# A stand-in for the parts of Transformer Engine that a CustomRecipe module written by `fp8scope
# advise --format te-recipe` touches, with TE d0067d0's names, signatures and checks, so tests can
# load and run that module without TE (which needs a GPU and PyPI). Test fixture only.
