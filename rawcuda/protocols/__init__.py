"""Protocols: DLPack and the CUDA Array Interface as data -- structs, capsules, a producer's dict.

No context, no stream, no driver call: what another library's array says, read and checked, and what
rawcuda says of its own. The readability probe for a foreign stream number lives here too.
"""
