import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyFactory;
import java.security.PrivateKey;
import java.security.PublicKey;
import java.security.SecureRandom;
import java.security.spec.MGF1ParameterSpec;
import java.security.spec.PKCS8EncodedKeySpec;
import java.security.spec.X509EncodedKeySpec;
import java.util.Base64;
import javax.crypto.Cipher;
import javax.crypto.KeyGenerator;
import javax.crypto.SecretKey;
import javax.crypto.spec.GCMParameterSpec;
import javax.crypto.spec.OAEPParameterSpec;
import javax.crypto.spec.PSource;
import javax.crypto.spec.SecretKeySpec;

/**
 * The encryption of Aiven's tiered-storage-for-apache-kafka done by Java's own JCE (SunJCE), for
 * the cross-check of kafkalog's reader (tests/objectstore/test_aiven_jce.py). As the plugin's
 * AesEncryptionProvider, EncryptionChunkEnumeration and RsaEncryptionProvider do: a 256-bit AES data
 * key and a separately generated 256-bit AAD per segment; each piece AES/GCM/NoPadding with a fresh
 * cipher (its random 12-byte IV), the AAD, a 128-bit tag, stored as IV || ciphertext || tag; the
 * data key wrapped with RSA-OAEP, SHA3-512 for the hash and for MGF1, empty label (BouncyCastle's
 * "RSA/NONE/OAEPWithSHA3-512AndMGF1Padding", which the plugin uses, is exactly this parameter set),
 * serialized "keyId:" + base64 (EncryptedDataKey.serialize).
 *
 * encrypt PUBLIC_KEY.der KEY_ID DIR N: DIR/0.plain .. DIR/(N-1).plain -> DIR/i.enc, DIR/dataKey
 * (the serialized wrapped key), DIR/aad (raw bytes).
 * decrypt PRIVATE_KEY.der DIR N: DIR/dataKey, DIR/aad, DIR/i.enc -> DIR/i.plain.
 */
public final class AivenCrypto {
    private static final int GCM_TAG_LENGTH = 128;
    private static final int IV_SIZE = 12;

    private static OAEPParameterSpec oaep() {
        return new OAEPParameterSpec("SHA3-512", "MGF1", new MGF1ParameterSpec("SHA3-512"),
                                     PSource.PSpecified.DEFAULT);
    }

    public static void main(final String[] args) throws Exception {
        final KeyFactory rsaKeys = KeyFactory.getInstance("RSA");
        final Path dir = Path.of(args[args[0].equals("encrypt") ? 3 : 2]);
        final int n = Integer.parseInt(args[args[0].equals("encrypt") ? 4 : 3]);
        if (args[0].equals("encrypt")) {
            final PublicKey pub = rsaKeys.generatePublic(new X509EncodedKeySpec(Files.readAllBytes(Path.of(args[1]))));
            final KeyGenerator aesKeys = KeyGenerator.getInstance("AES");
            aesKeys.init(256, new SecureRandom());
            final SecretKey dataKey = aesKeys.generateKey();
            final byte[] aad = aesKeys.generateKey().getEncoded();
            final Cipher rsa = Cipher.getInstance("RSA/ECB/OAEPPadding");
            rsa.init(Cipher.ENCRYPT_MODE, pub, oaep(), new SecureRandom());
            final byte[] wrapped = rsa.doFinal(dataKey.getEncoded());
            Files.writeString(dir.resolve("dataKey"), args[2] + ":" + Base64.getEncoder().encodeToString(wrapped));
            Files.write(dir.resolve("aad"), aad);
            System.out.println("RSA " + rsa.getProvider().getName() + " " + rsa.getAlgorithm());
            for (int i = 0; i < n; i++) {
                final byte[] plain = Files.readAllBytes(dir.resolve(i + ".plain"));
                final Cipher aes = Cipher.getInstance("AES/GCM/NoPadding");
                aes.init(Cipher.ENCRYPT_MODE, dataKey, new SecureRandom());
                aes.updateAAD(aad);
                final byte[] iv = aes.getIV();
                if (iv.length != IV_SIZE) {
                    throw new IllegalStateException("IV of " + iv.length + " bytes");
                }
                final byte[] out = new byte[iv.length + aes.getOutputSize(plain.length)];
                System.arraycopy(iv, 0, out, 0, iv.length);
                aes.doFinal(plain, 0, plain.length, out, iv.length);
                Files.write(dir.resolve(i + ".enc"), out);
            }
        } else {
            final PrivateKey priv = rsaKeys.generatePrivate(new PKCS8EncodedKeySpec(Files.readAllBytes(Path.of(args[1]))));
            final String text = Files.readString(dir.resolve("dataKey"));
            final Cipher rsa = Cipher.getInstance("RSA/ECB/OAEPPadding");
            rsa.init(Cipher.DECRYPT_MODE, priv, oaep());
            final byte[] key = rsa.doFinal(Base64.getDecoder().decode(text.substring(text.indexOf(':') + 1)));
            final SecretKeySpec dataKey = new SecretKeySpec(key, "AES");
            final byte[] aad = Files.readAllBytes(dir.resolve("aad"));
            for (int i = 0; i < n; i++) {
                final byte[] enc = Files.readAllBytes(dir.resolve(i + ".enc"));
                final Cipher aes = Cipher.getInstance("AES/GCM/NoPadding");
                aes.init(Cipher.DECRYPT_MODE, dataKey, new GCMParameterSpec(GCM_TAG_LENGTH, enc, 0, IV_SIZE));
                aes.updateAAD(aad);
                Files.write(dir.resolve(i + ".plain"), aes.doFinal(enc, IV_SIZE, enc.length - IV_SIZE));
            }
        }
    }
}
