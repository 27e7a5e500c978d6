# What `make wheelhouse` downloads and `make install OFFLINE=...` installs (sourced by
# scripts/wheelhouse.sh and scripts/install.sh); torch is never among them: the node's
# own CUDA build stays.
# Binary wheels installed with their dependencies (all in the wheelhouse):
FSA_OFFLINE_WITH_DEPS=(hydra-core==1.3.2 omegaconf==2.3.0 bitarray sacrebleu regex tqdm cffi
                       scikit-learn packaging numpy cython sacremoses subword-nmt tensorboardX)
# Packages that require torch (fairseq-fixed also torchaudio): wheels without dependencies
FSA_OFFLINE_NO_DEPS=(fairseq-fixed==0.12.3.1 "entmax>=1.1")
